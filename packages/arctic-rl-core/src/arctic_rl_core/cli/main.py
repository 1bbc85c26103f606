"""Entry point of the `arctic-rl` command.

Every subcommand is a module that defines `register(subparsers)`; it adds its parser and sets
`func` (called with the parsed namespace, returning an exit code). The core's own are the modules of
`arctic_rl_core.cli.commands` (discovered, not listed, so a subcommand is one new file); other
installed packages add theirs through the `arctic_rl.commands` entry-point group (the testbed:
`serve`, `demo`, `bench`). An import error in a subcommand module is not swallowed: the command
fails loudly.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from types import ModuleType

from arctic_rl_core import __version__
from arctic_rl_core.cli import commands

# Subcommand modules of other installed packages: `[project.entry-points."arctic_rl.commands"]`,
# `name = "package.module"` (a module with `register(subparsers)`).
COMMANDS_ENTRY_POINT_GROUP = "arctic_rl.commands"


def command_modules() -> dict[str, ModuleType]:
    """Every subcommand module by name: the core's, then the entry points' (a name twice is an error)."""
    found = {
        info.name: importlib.import_module(f"{commands.__name__}.{info.name}")
        for info in pkgutil.iter_modules(commands.__path__)
    }
    for entry in entry_points(group=COMMANDS_ENTRY_POINT_GROUP):
        if entry.name in found:
            raise RuntimeError(
                f"arctic-rl subcommand {entry.name!r} is defined twice (entry point {entry.value} of "
                f"{COMMANDS_ENTRY_POINT_GROUP}): uninstall one of the packages that define it"
            )
        found[entry.name] = entry.load()
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arctic-rl",
        description="Arctic RL for SkyRL and verl: config, data, evaluation, benchmarks and diagnostics.",
    )
    parser.add_argument("--version", action="version", version=f"arctic-rl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in sorted(command_modules().items()):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())

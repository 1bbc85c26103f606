"""Entry point of the `arctic-rl` command.

Every subcommand is a module in `arctic_rl_core.cli.commands` that defines
`register(subparsers)`; it adds its parser and sets `func` (called with the parsed namespace,
returning an exit code). Modules are discovered, not listed, so a subcommand is one new file.
An import error in a subcommand module is not swallowed: the command fails loudly.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from arctic_rl_core import __version__
from arctic_rl_core.cli import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arctic-rl",
        description="Arctic RL for SkyRL and verl: config, data, evaluation, benchmarks and diagnostics.",
    )
    parser.add_argument("--version", action="version", version=f"arctic-rl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
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

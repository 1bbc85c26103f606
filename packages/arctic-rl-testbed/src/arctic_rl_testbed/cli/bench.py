"""`arctic-rl bench <name>`: side-by-side benchmarks (see `arctic_rl_testbed.bench`)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from arctic_rl_testbed import bench


def _benchmark_modules():
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name == "report":
            continue
        yield importlib.import_module(f"{bench.__name__}.{info.name}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="Run a benchmark: prints a table and, last, 'ratio: <x>x' (baseline / ours)."
    )
    names = parser.add_subparsers(dest="benchmark", metavar="NAME", required=True)
    for module in _benchmark_modules():
        sub = names.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(func=_runner(module))


def _runner(module):
    def run(args: argparse.Namespace) -> int:
        from arctic_rl_testbed.bench.report import print_result

        print_result(module.run(args))
        return 0

    return run

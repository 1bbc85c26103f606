"""`arctic-rl bench <name>`: side-by-side benchmarks (see `arctic_rl_testbed.bench`); `arctic-rl bench`
(or `bench all`) runs every one at its defaults and prints one table of all of them."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from arctic_rl_testbed import bench
from arctic_rl_testbed.bench.report import print_result, summary_table


def _benchmark_modules():
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            yield module


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="Run a benchmark: prints a table and, last, 'ratio: <x>x' (baseline / ours); "
        "no name (or 'all'): every benchmark, then one table of all of them.",
    )
    names = parser.add_subparsers(dest="benchmark", metavar="NAME")
    modules = list(_benchmark_modules())
    for module in modules:
        sub = names.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(func=_runner(module))
    every = names.add_parser("all", help="every benchmark at its defaults, then one table of all of them")
    _add_all_arguments(every, modules)
    every.set_defaults(func=_run_all(modules))
    _add_all_arguments(parser, modules)
    parser.set_defaults(func=_run_all(modules))


def _add_all_arguments(parser: argparse.ArgumentParser, modules: list) -> None:
    optional = [m.NAME for m in modules if getattr(m, "ALL_SKIPS_BECAUSE", None)]
    parser.add_argument(
        "--skip", nargs="+", default=[], metavar="NAME", help="benchmarks to leave out of the table"
    )
    parser.add_argument(
        "--include",
        nargs="+",
        default=[],
        metavar="NAME",
        help=f"benchmarks that 'all' leaves out unless named: {', '.join(optional)}",
    )


def _runner(module):
    def run(args: argparse.Namespace) -> int:
        print_result(module.run(args))
        return 0

    return run


def _run_all(modules: list):
    def run(args: argparse.Namespace) -> int:
        from rich.console import Console  # noqa: PLC0415 - CLI start-up

        known = {m.NAME for m in modules}
        unknown = sorted((set(args.skip) | set(args.include)) - known)
        if unknown:
            raise SystemExit(f"arctic-rl bench: unknown benchmark(s) {unknown}; known: {sorted(known)}")
        rows = []
        for module in modules:
            skipped = getattr(module, "ALL_SKIPS_BECAUSE", None)
            if module.NAME in args.skip:
                rows.append((module.NAME, "skipped (--skip)"))
                continue
            if skipped and module.NAME not in args.include:
                rows.append((module.NAME, f"left out: {skipped} (--include {module.NAME})"))
                continue
            print(f"== arctic-rl bench {module.NAME}", flush=True)
            parser = argparse.ArgumentParser()
            module.add_arguments(parser)
            try:
                result = module.run(parser.parse_args([]))
            except (Exception, SystemExit) as error:  # one failing benchmark does not hide the others
                rows.append((module.NAME, f"failed: {type(error).__name__}: {error}"))
                continue
            print_result(result)
            rows.append((module.NAME, result))
        Console(width=200).print(summary_table(rows))
        return 0

    return run

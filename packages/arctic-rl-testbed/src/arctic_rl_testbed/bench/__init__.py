"""Benchmarks run by `arctic-rl bench <name>`.

Each module here defines `NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> BenchResult`.
A benchmark measures its baseline and our implementation side by side in the same run; the
command prints the table and, as its last line, `ratio: <x>x` (baseline time / our time).
"""

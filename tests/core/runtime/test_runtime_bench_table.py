"""The bench report: each comparison's ratio against its named baseline, a ratio measured under unmet
conditions printed as no result, and `arctic-rl bench` (no name, or `all`) printing one table of every
benchmark, with those it could not run named and why. No timing is asserted."""

from __future__ import annotations

import argparse
import types

import pytest
from arctic_rl_testbed.bench import conditions
from arctic_rl_testbed.bench.report import BenchResult, Comparison, print_result, summary_table
from arctic_rl_testbed.cli import bench as bench_command
from rich.console import Console


def test_unmet_parallel_conditions_are_named():
    assert conditions.unmet_parallel_conditions([1.9, 1.8], load=0.5, cores=2) is None
    assert "second core is not free" in conditions.unmet_parallel_conditions([1.9, 1.2], load=0.5, cores=2)
    assert "load average 3.0 on 2 cores" in conditions.unmet_parallel_conditions(
        [1.9, 1.8], load=3.0, cores=2
    )
    assert "1 core(s)" in conditions.unmet_parallel_conditions([1.0, 1.0], load=0.0, cores=1)


def test_parallel_conditions_check_before_and_after(monkeypatch: pytest.MonkeyPatch):
    checks = iter([1.9, 1.1])
    monkeypatch.setattr(conditions, "two_core_speedup", lambda: next(checks))
    loads = iter([0.7, 3.4])  # other work's load before the runs; the benchmark's own after them
    monkeypatch.setattr(conditions.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    with conditions.ParallelConditions() as machine:
        pass
    assert machine.result.checks == (1.9, 1.1)
    assert machine.result.load == 0.7
    assert "1.10x < 1.50x" in machine.result.unmet  # the worse of the two counts
    assert machine.result.describe().startswith("two free cores needed: two-core check 1.90x; 1.10x")


def test_a_result_under_unmet_conditions_prints_no_ratio(capsys):
    result = BenchResult("t", "base", 2.0, "ours", 1.0, unmet_conditions="load average 9.0 on 2 cores")
    print_result(result)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2:] == [
        "measured under unmet conditions: 2.00x (not a result)",
        "ratio: not measured (load average 9.0 on 2 cores)",
    ]


def test_ratios_are_how_many_times_better_ours_is():
    assert Comparison("b", 3.0, "o", 1.5).ratio == 2.0  # times: baseline / ours
    assert Comparison("b", 0.5, "o", 0.6, unit="EX", higher_is_better=True).ratio == pytest.approx(1.2)
    assert Comparison("limit", 2.0, "o", 2.4).ratio_text() == "0.83x"
    unmet = Comparison("b", 3.0, "o", 1.5, unmet="no SkyRL environment")
    assert unmet.ratio_text() == "not measured (no SkyRL environment; 2.00x under them, not a result)"
    with pytest.raises(ValueError, match="non-positive value for ours"):
        _ = Comparison("b", 1.0, "o", 0.0).ratio


def _table_text(rows) -> str:
    console = Console(width=400, record=True)
    console.print(summary_table(rows))
    return console.export_text()


def test_the_summary_table_has_a_row_per_comparison():
    result = BenchResult(
        "title", "strongest", 4.0, "ours", 1.0, conditions="one thread; load 0.5", goal="> 1x",
        more=[Comparison("framework's own", 8.0, "ours", 1.0, goal=">= 5x")],
    )  # fmt: skip
    text = _table_text([("x", result), ("y", "left out: an hour of runs (--include y)")])
    lines = [line for line in text.splitlines() if "│" in line]
    assert any("strongest: 4 s" in line and "ours: 1 s" in line and "4.00x" in line for line in lines)
    assert any("framework's own: 8 s" in line and "8.00x" in line and ">= 5x" in line for line in lines)
    assert any("not measured" in line and "left out: an hour of runs" in line for line in lines)


def _fake(name: str, run, skips: str | None = None) -> types.SimpleNamespace:
    module = types.SimpleNamespace(NAME=name, HELP=f"the {name} benchmark", run=run)
    module.add_arguments = lambda parser: parser.add_argument("--size", type=int, default=3)
    if skips:
        module.ALL_SKIPS_BECAUSE = skips
    return module


def test_bench_all_runs_each_at_its_defaults_and_names_what_it_could_not(capsys):
    seen = []

    def good(args: argparse.Namespace) -> BenchResult:
        seen.append(args.size)
        return BenchResult("good", "strongest", 2.0, "ours", 1.0)

    def broken(args: argparse.Namespace) -> BenchResult:
        raise SystemExit("no data set here")

    modules = [_fake("good", good), _fake("broken", broken), _fake("long", good, skips="an hour")]
    run_all = bench_command._run_all(modules)
    assert run_all(argparse.Namespace(skip=[], include=[])) == 0
    out = capsys.readouterr().out
    assert seen == [3]  # the defaults; the long one left out unless asked
    assert "failed: SystemExit: no data set here" in out
    assert "left out: an hour (--include long)" in out
    assert "2.00x" in out
    assert run_all(argparse.Namespace(skip=["good"], include=["long"])) == 0
    assert seen == [3, 3]  # good skipped, long included
    assert "skipped (--skip)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"unknown benchmark\(s\) \['nope'\]"):
        run_all(argparse.Namespace(skip=["nope"], include=[]))


def test_bench_without_a_name_is_bench_all():
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="command")
    bench_command.register(subparsers)
    plain = parser.parse_args(["bench", "--skip", "learning"])
    every = parser.parse_args(["bench", "all", "--skip", "learning"])
    assert plain.skip == every.skip == ["learning"]
    assert plain.func.__qualname__ == every.func.__qualname__ == "_run_all.<locals>.run"

"""The bird-scoring benchmark: its batches, its comparisons and its conditions (no timing asserted).
Against SkyRL-SQL's own scorer it runs in SkyRL's environment: tests/skyrl/test_skyrl_bench_bird_scoring.py."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.sql_extract import extract_sql
from arctic_rl_testbed.bench import bird_scoring, conditions

TINY = ["--prompts", "3", "--rollouts", "6", "--orders", "1500", "--repeats", "1"]
TINY += ["--runaways", "2", "--hostile-timeout", "0.3"]


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bird_scoring.add_arguments(parser)
    return parser.parse_args(argv)


def test_both_formats_carry_the_same_statement(tmp_path: Path) -> None:
    rng = random.Random(0)
    db = tmp_path / "sales.sqlite"
    bird_scoring._build_database(db, 500, rng)
    batch = bird_scoring._build_batch(str(db), 4, 16, rng)
    hostile = bird_scoring._hostile(batch, str(db), 3, rng)
    assert len(hostile.requests) == len(hostile.skyrl) == 4 * 16 + 3
    for request, (completion, gold, db_file) in zip(hostile.requests, hostile.skyrl, strict=True):
        assert (gold, db_file) == (request.gold_sql, str(db))
        ours = extract_sql(request.solution_str).sql
        if ours is None:
            assert "<solution>" not in completion  # SkyRL-SQL's format failure (-1)
        else:
            assert completion.endswith(f"<solution>{ours}</solution>")
    runaways = [r for r in hostile.requests if "WITH RECURSIVE" in r.solution_str]
    assert len({extract_sql(r.solution_str).sql for r in runaways}) == 3  # distinct: each one runs


def test_without_skyrl_the_comparisons_with_it_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bird_scoring, "skyrl_python", lambda given: None)
    monkeypatch.setattr(conditions, "two_core_speedup", lambda: 1.9)  # no torch import (tested apart)
    result = bird_scoring.run(_args(TINY))
    skyrl_grpo, skyrl_hostile, limit = result.comparisons
    for comparison in (skyrl_grpo, skyrl_hostile):
        assert comparison.unmet is not None and "no SkyRL environment" in comparison.unmet
        assert "not measured" in comparison.ratio_text()
    # the physical limit: 2 runaways x 0.3 s over at most 8 workers, or the GRPO batch alone
    assert limit.baseline_value == pytest.approx(max(0.3, result.ours_seconds))  # nor before its own work
    assert "physical limit" in limit.baseline and limit.ours_value > 0
    rows = dict(result.extra_rows)
    assert float(rows["ours, same batch again (gold cached)"]) > 0
    # the fastest hostile repeat's schedule: each runaway's send (a loaded machine may time out more)
    timeline = rows["hostile batch, fastest repeat (s from its start)"]
    sends = timeline.split(";")[0].removeprefix("runaways sent at ").split(", ")
    assert len(sends) >= 2 and float(timeline.split("end ")[1].split(";")[0]) >= max(map(float, sends)) + 0.3
    assert "two free cores needed" in result.conditions

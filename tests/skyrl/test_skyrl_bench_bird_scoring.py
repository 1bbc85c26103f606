"""`arctic-rl bench bird-scoring` against SkyRL-SQL's own scorer (skyrl-gym's text2sql reward, installed
here): the baseline gives SkyRL-SQL's rewards, and on a tiny GRPO batch and its hostile twin every
verdict agrees with ours (the run fails otherwise). No timing is asserted."""

from __future__ import annotations

import argparse
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from adapter_skyrl import sql_scorer_baseline
from arctic_rl_testbed.bench import bird_scoring, conditions

TINY = ["--prompts", "3", "--rollouts", "6", "--orders", "1500", "--repeats", "1"]
TINY += ["--runaways", "2", "--hostile-timeout", "0.3"]


def test_the_baseline_is_skyrl_sqls_reward(tmp_path: Path) -> None:
    db = tmp_path / "sales.sqlite"
    bird_scoring._build_database(db, 300, random.Random(0))
    gold = "SELECT COUNT(*) FROM orders WHERE year = 2020"
    rollouts = [
        [
            "<think>x</think>\n<solution>SELECT count(id) FROM orders WHERE year = 2020</solution>",
            gold,
            str(db),
        ],
        ["<think>x</think>\n<solution>SELECT COUNT(*) FROM orders</solution>", gold, str(db)],
        ["no format at all", gold, str(db)],
    ]
    with ThreadPoolExecutor(4) as pool:
        seconds, rewards = sql_scorer_baseline.score(pool, rollouts, timeout_s=5.0)
    assert rewards == [1.0, 0.0, -1.0] and seconds > 0


def test_verdicts_agree_with_skyrl_sqls_on_both_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conditions, "two_core_speedup", lambda: 1.9)
    parser = argparse.ArgumentParser()
    bird_scoring.add_arguments(parser)
    args = parser.parse_args(TINY)
    assert bird_scoring.skyrl_python(None) == sys.executable  # skyrl-gym is here
    result = bird_scoring.run(args)  # SystemExit if any verdict differs from SkyRL-SQL's
    grpo, hostile, limit = result.comparisons
    assert "SkyRL-SQL's scorer" in grpo.baseline and "SkyRL-SQL's scorer" in hostile.baseline
    assert 0 < grpo.baseline_value < float("inf") and 0 < hostile.baseline_value < float("inf")
    # SkyRL-SQL's scorer also waits out each runaway's limit: the hostile batch takes it at least that
    assert hostile.baseline_value >= 0.3
    assert result.notes[0].startswith("verdicts agree with SkyRL-SQL's for all 18 + 20 rollouts")
    assert limit.baseline_value == pytest.approx(max(0.3, result.ours_seconds))  # nor before its own work

"""The bird-scoring benchmark runs on a tiny batch and finds identical verdicts (no timing asserted)."""

from __future__ import annotations

import argparse

from arctic_rl_testbed.bench import bird_scoring


def test_benchmark_compares_identical_verdicts_on_a_tiny_batch() -> None:
    parser = argparse.ArgumentParser()
    bird_scoring.add_arguments(parser)
    args = parser.parse_args(["--prompts", "4", "--rollouts", "6", "--orders", "1500", "--repeats", "1"])
    result = bird_scoring.run(args)  # raises SystemExit if any verdict differs
    rows = dict(result.extra_rows)
    assert rows["queries run: baseline"] == str(
        4 * 6 + int(rows["rollouts with SQL / distinct predicted SQL"].split(" / ")[0])
    )
    with_sql, distinct = (int(x) for x in rows["rollouts with SQL / distinct predicted SQL"].split(" / "))
    assert distinct <= with_sql <= 24
    assert int(rows["queries run: ours (distinct predictions + golds)"]) == distinct + 4
    assert result.baseline_seconds > 0 and result.ours_seconds > 0
    assert bird_scoring.NAME == "bird-scoring"

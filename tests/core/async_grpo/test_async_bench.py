"""`arctic-rl bench async` end to end at a tiny size: both modes run, the split and the staleness are
reported, the last line is `ratio: <async / sync>x` (the number itself is measured, not asserted: it
depends on how many cores are free)."""

from __future__ import annotations

import re

from arctic_rl_core.cli import main as cli_main


def test_bench_async_prints_the_split_and_the_ratio_last(capsys) -> None:
    argv = ["bench", "async", "--hidden", "32", "--layers", "1", "--prompts", "2", "--rollouts", "2"]
    argv += ["--prompt-len", "4", "--response-len", "6", "--steps", "3", "--repeats", "1"]
    assert cli_main.main(argv) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    # a number, or why the machine could not give one (no second free core, load)
    assert re.fullmatch(r"ratio: \d+\.\d\dx", lines[-1]) or re.fullmatch(
        r"ratio: not measured \(.+\)", lines[-1]
    )
    assert re.search(r"sync step split: generation \d+\.\d+ s \(\d+%\), training \d+\.\d+ s \(\d+%\)", out)
    assert re.search(r"staleness of trained groups \(k=1\)\s*│\s*0, 1\s*│", out)  # overlapped, bound held
    assert re.search(r"dropped groups \(k=1\)\s*│\s*0\s*│", out)

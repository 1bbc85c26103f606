"""`arctic-rl bench learning`: the orchestration (each seed's async run starts from its sync run's warm
start, finished runs reused, a folder with other settings refused), the statistics and the ratio line.
The demo itself is replaced by a small script writing what a finished demo writes (the real comparison is
measured with the real demo; see docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from arctic_rl_core.cli import main as cli_main
from arctic_rl_testbed.bench import learning
from arctic_rl_testbed.bench.report import print_result
from arctic_rl_testbed.demo.run import resolve_options

# A finished demo run: config.yaml, metrics (its warm start and accuracy before, unless already there),
# summary.json with sampled train EX after = 100 + seed - 2k (of 128), before = 90.
FAKE_DEMO = r"""
import json, sys, yaml
from pathlib import Path
run, seed, k, log = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
metrics = run / "metrics.jsonl"
seeded = metrics.is_file()
with log.open("a") as f:
    f.write(json.dumps({"run": run.name, "seeded": seeded, "warm_start": (run / "warm_start" / "hf").is_dir(),
                        "kinds": [json.loads(l)["kind"] for l in metrics.read_text().splitlines()] if seeded else []}) + "\n")
run.mkdir(parents=True, exist_ok=True)
(run / "warm_start" / "hf").mkdir(parents=True, exist_ok=True)
if not seeded:
    metrics.write_text("\n".join(json.dumps(r) for r in (
        {"kind": "warm_start", "step": 1}, {"kind": "eval", "phase": "before", "split": "train"},
        {"kind": "grpo_step", "step": 1}, {"kind": "eval", "phase": "after", "split": "train"})) + "\n")
demo = {"framework": "skyrl", "task": "bird", "steps": 24, "seed": seed, "max_staleness": k, "num_threads": None}
(run / "config.yaml").write_text(yaml.safe_dump({"demo": demo}))
score = lambda c: {"correct": c, "total": 16, "sampled": {"correct": c * 8, "total": 128}}
after = 100 + seed - 2 * k
(run / "summary.json").write_text(json.dumps({
    "max_staleness": k, "seconds": {"grpo": 60.0 + k},
    "before": {"train": score(90 // 8) | {"sampled": {"correct": 90, "total": 128}}},
    "after": {"train": {"correct": 15, "total": 16, "sampled": {"correct": after, "total": 128}}}}))
"""


def _args(out: Path, *extra: str):
    return cli_main.build_parser().parse_args(["bench", "learning", "--out", str(out), *extra])


@pytest.fixture
def fake_demo(monkeypatch, tmp_path):
    log = tmp_path / "calls.jsonl"

    def command(args, seed, k, run_dir):
        return [sys.executable, "-c", FAKE_DEMO, str(run_dir), str(seed), str(k), str(log)], {}, tmp_path

    monkeypatch.setattr(learning, "demo_command", command)
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def test_pairs_share_a_warm_start_runs_are_reused_and_the_ratio_is_async_over_sync(
    fake_demo, tmp_path, capsys
):
    out = tmp_path / "runs"
    args = _args(out, "--seeds", "1", "2", "3")
    result = learning.run(args)
    calls = fake_demo()
    assert [c["run"] for c in calls] == [f"seed{s}-async{k}" for s in (1, 2, 3) for k in (0, 1)]
    for call in calls:  # the async run of a seed starts from its sync run: checkpoint, warm start, before
        assert call["seeded"] == call["warm_start"] == call["run"].endswith("async1")
        assert call["kinds"] == ([] if call["run"].endswith("async0") else ["warm_start", "eval"])
    # sync 101, 102, 103 of 128; async 99, 100, 101: the same seeds' differences are all -2 points of 128
    assert result.baseline_seconds == pytest.approx(100 * 102 / 128)
    assert result.ours_seconds == pytest.approx(100 * 100 / 128)
    assert result.ratio == pytest.approx(100 / 102)
    rows = dict(result.extra_rows)
    assert rows["async - sync per seed (points): mean +- sd, standard error"] == "-1.6 +- 0.0, 0.0"
    assert rows["verdict (|mean difference| <= 2 standard errors)"] == "NOT within noise"
    assert "101/128 | 90/128 -> 99/128" in rows["seed 1: sampled train EX before -> after (sync | async 1)"]
    print_result(result)
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "ratio: 0.98x"

    again = learning.run(args)  # every run finished: all reused, nothing rerun
    assert len(fake_demo()) == 6 and again.ratio == result.ratio
    with pytest.raises(learning.LearningBenchError, match=r"steps=24 \(wanted 12\)"):
        learning.run(_args(out, "--seeds", "1", "2", "--steps", "12"))


@pytest.mark.parametrize("jobs", ["1", "3"])
def test_one_warm_start_starts_every_run_from_the_first_seeds(fake_demo, tmp_path, jobs):
    result = learning.run(_args(tmp_path / "runs", "--seeds", "5", "6", "--one-warm-start", "--jobs", jobs))
    calls = fake_demo()
    seeded = {c["run"]: c["seeded"] for c in calls}
    assert seeded == {"seed5-async0": False, "seed5-async1": True, "seed6-async0": True, "seed6-async1": True}
    assert calls[0]["run"] == "seed5-async0"  # the others start from its warm start: it runs first
    assert result.baseline_seconds == pytest.approx(100 * (105 + 106) / 2 / 128)


def test_paired_verdict_and_its_limits():
    diff, stderr, within = learning.paired_verdict([80.0, 90.0, 85.0], [82.0, 86.0, 85.0])
    assert diff.mean == pytest.approx(-2 / 3) and stderr == pytest.approx(diff.sd / 3**0.5) and within
    with pytest.raises(ValueError, match=">= 2 seeds"):
        learning.paired_verdict([80.0], [81.0])
    with pytest.raises(SystemExit, match=">= 2 distinct --seeds"):
        learning.run(_args(Path("unused"), "--seeds", "1", "1"))


def test_demo_seed_flag_sets_the_run_seed_and_is_fixed_on_resume(tmp_path):
    parse = cli_main.build_parser().parse_args
    args = parse(["demo", "--seed", "7", "--out", str(tmp_path / "r")])
    options = resolve_options(args)
    assert options.seed == 7
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text(yaml.safe_dump({"demo": options.model_dump(mode="json")}))
    with pytest.raises(SystemExit, match="seed=8 differs from the run's seed=7"):
        resolve_options(parse(["demo", "--resume", str(tmp_path / "r"), "--seed", "8"]))

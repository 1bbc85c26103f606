"""`arctic-rl demo` for real through SkyRL 0.4.0's trainer on the reference backend, with tiny
settings: warm start, accuracy before, GRPO steps, Ctrl-C after step 1 leaving a checkpoint,
`--resume` finishing the run, and what the run directory holds."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from arctic_rl_core.demo import run as demo_run
from arctic_rl_core.demo.options import DemoModel, DemoOptions
from arctic_rl_core.demo.run_log import MetricsLog

TINY = DemoModel(
    num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1
)


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    options = DemoOptions(
        out=str(run_dir),
        steps=2,
        model=TINY,
        warm_start_steps=2,
        warm_start_batch=4,
        prompts_per_step=2,
        rollouts_per_prompt=2,
        entropy_loss_coef=0.01,  # a gradient even when every reward ties: the weights move every step
        num_threads=1,
    )
    original_append = MetricsLog.append

    def interrupt_after_step_1(self, kind, **fields):
        record = original_append(self, kind, **fields)
        if kind == "grpo_step" and fields["step"] == 1:
            raise KeyboardInterrupt  # what Ctrl-C raises, here right after step 1 was logged
        return record

    MetricsLog.append = interrupt_after_step_1
    try:
        first_rc = demo_run.run_demo(options)
    finally:
        MetricsLog.append = original_append
    after_interrupt = {
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").glob("global_step_*")),
        "summary": (run_dir / "summary.json").exists(),
    }
    resumed_rc = demo_run.main(["--resume", str(run_dir)])
    return run_dir, first_rc, after_interrupt, resumed_rc


def test_ctrl_c_leaves_a_checkpoint_and_resume_finishes(interrupted_then_resumed):
    run_dir, first_rc, after_interrupt, resumed_rc = interrupted_then_resumed
    assert first_rc == demo_run.INTERRUPTED_EXIT and after_interrupt == {
        "checkpoints": ["global_step_1"],
        "summary": False,
    }
    assert resumed_rc == 0
    log = MetricsLog(run_dir)
    assert [r["step"] for r in log.records("warm_start")] == [1, 2]  # not redone on resume
    assert [(r["phase"], r["split"]) for r in log.records("eval")] == [
        ("before", "heldout"), ("before", "train"), ("after", "heldout"), ("after", "train"),
    ]  # fmt: skip
    assert [r["step"] for r in log.records("grpo_step")] == [1, 2]  # step 2 ran once, after the resume
    versions = {(r["phase"], r["split"]): r["weights_version"] for r in log.records("eval")}
    assert versions[("before", "train")] == 2  # the warm start's 2 supervised steps
    assert versions[("after", "train")] == 2  # the sampler on the final GRPO step's weights


def test_the_backend_ran_in_the_driver_process(interrupted_then_resumed):
    import os

    run_dir, *_ = interrupted_then_resumed
    placements = MetricsLog(run_dir).records("backend")
    assert [p["where"] for p in placements] == ["in process", "in process"]  # first attempt, resume
    assert {p["pid"] for p in placements} == {os.getpid()}


def test_steps_are_real_grpo_steps_on_advancing_weights(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    steps = MetricsLog(run_dir).grpo_steps()
    for record in steps:
        for key in ("reward_mean", "loss", "grad_norm", "seconds_generate", "seconds_train", "seconds_step"):
            assert math.isfinite(record[key]), key
        assert 0.0 <= record["reward_mean"] <= 1.0 and record["grad_norm"] > 0
    # Each step's update is synced to the sampler; the next step's rollouts use it (also across the resume).
    assert [s["weights_version"] for s in steps] == [1, 2]
    assert [s["rollout_weights_version"] for s in steps] == [0, 1]
    assert [s["optimizer_steps"] for s in steps] == [1, 2]


def test_run_directory_holds_config_metrics_plot_checkpoints_and_summary(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["demo"]["steps"] == 2 and config["demo"]["framework"] == "skyrl"
    assert "trainer.max_training_steps=2" in config["skyrl_overrides"]
    assert config["arctic_rl"]["backend"]["kind"] == "reference"
    assert config["arctic_rl"]["backend"]["reference"]["model_path"] == str(
        (run_dir / "warm_start" / "hf").resolve()
    )
    assert (run_dir / "warm_start" / "hf" / "config.json").is_file()
    assert (run_dir / "checkpoints" / "global_step_2" / "policy" / "backend").is_dir()
    assert (run_dir / "reward_loss.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == [1, 2] and summary["weights_version"] == [1, 2]
    for phase in ("before", "after"):
        assert summary[phase]["heldout"]["metric"] == "EX" and summary[phase]["heldout"]["total"] == 10
        assert summary[phase]["train"]["total"] == 16
    assert set(summary["seconds"]) >= {"grpo", "eval_after", "total"}


def test_gsm8k_task_runs_end_to_end_with_its_own_reward_and_metric(tmp_path):
    from arctic_rl_core.demo.tasks import load_task
    from arctic_rl_core.envs.gsm8k import compute_score

    run_dir = tmp_path / "gsm8k"
    options = DemoOptions(
        task="gsm8k",
        out=str(run_dir),
        steps=1,
        model=TINY,
        warm_start_steps=2,
        warm_start_batch=4,
        prompts_per_step=2,
        rollouts_per_prompt=2,
        max_response_length=96,  # the longest supervised GSM8K answer is 64 tokens
        num_threads=1,
    )
    assert demo_run.run_demo(options) == 0
    rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {row["env_class"] for row in rows} == {"gsm8k_arctic"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["task"] == "gsm8k" and summary["steps"] == [1]
    assert summary["after"]["heldout"]["metric"] == "accuracy" and summary["after"]["heldout"]["total"] == 4
    assert summary["after"]["train"]["total"] == 8
    assert 0.0 <= summary["reward_mean"][0] <= 1.0
    # the recorded accuracy is the GSM8K exact-answer score of the recorded greedy answers
    task = load_task("gsm8k")
    for record in MetricsLog(run_dir).records("eval"):
        split_rows = task.heldout_rows if record["split"] == "heldout" else task.train_rows
        rescored = [
            compute_score("gsm8k", answer, row["reward_model"]["ground_truth"])["score"]
            for answer, row in zip(record["answers"], split_rows, strict=True)
        ]
        assert record["correct"] == sum(rescored) and record["total"] == len(split_rows)

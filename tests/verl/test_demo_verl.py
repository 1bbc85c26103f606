"""`arctic-rl demo --framework verl` for real: verl 0.9.1's V1 trainer on a local Ray cluster, the
reference backend started by the trainer as a Ray actor in its own process, tiny settings. Warm
start, accuracy before, GRPO steps, a real SIGINT after step 1 leaving a checkpoint, `--resume`
finishing the run, and what the run directory holds. One module-scoped run (Ray and verl start-up
dominate); every test reads what it left behind."""

from __future__ import annotations

import json
import math
import os
import signal

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
    run_dir = tmp_path_factory.mktemp("demo_verl") / "run"
    options = DemoOptions(
        framework="verl",
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

    def ctrl_c_after_step_1(self, kind, **fields):
        record = original_append(self, kind, **fields)
        if kind == "grpo_step" and fields["step"] == 1:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends, right after step 1 was logged
        return record

    MetricsLog.append = ctrl_c_after_step_1
    try:
        first_rc = demo_run.run_demo(options)
    finally:
        MetricsLog.append = original_append
    after_interrupt = {
        "checkpoints": sorted(p.name for p in (run_dir / "checkpoints").glob("global_step_*")),
        "summary": (run_dir / "summary.json").exists(),
        "steps": [r["step"] for r in MetricsLog(run_dir).records("grpo_step")],
    }
    resumed_rc = demo_run.main(["--resume", str(run_dir)])
    return run_dir, first_rc, after_interrupt, resumed_rc


def test_ctrl_c_leaves_a_checkpoint_and_resume_finishes(interrupted_then_resumed):
    run_dir, first_rc, after_interrupt, resumed_rc = interrupted_then_resumed
    assert first_rc == demo_run.INTERRUPTED_EXIT
    assert after_interrupt == {"checkpoints": ["global_step_1"], "summary": False, "steps": [1]}
    assert resumed_rc == 0
    log = MetricsLog(run_dir)
    assert [r["step"] for r in log.records("warm_start")] == [1, 2]  # not redone on resume
    assert [(r["phase"], r["split"]) for r in log.records("eval")] == [
        ("before", "heldout"), ("before", "train"), ("after", "heldout"), ("after", "train"),
    ]  # fmt: skip
    assert [r["step"] for r in log.records("grpo_step")] == [1, 2]  # step 2 ran once, after the resume


def test_the_backend_ran_as_a_ray_actor_in_its_own_process(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    placements = MetricsLog(run_dir).records("backend")
    assert len(placements) == 2  # the first attempt and the resumed one each started a backend
    for placement in placements:
        assert placement["where"] == "ray actor"
        assert placement["driver_pid"] == os.getpid()  # the demo drove verl from this process
        assert placement["pid"] != os.getpid() and placement["node_id"]
    assert placements[0]["pid"] != placements[1]["pid"]  # a fresh cluster after the interrupt


def test_steps_are_real_grpo_steps_on_advancing_weights(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    steps = MetricsLog(run_dir).grpo_steps()
    for record in steps:
        for key in ("reward_mean", "loss", "grad_norm", "seconds_generate", "seconds_train", "seconds_step"):
            assert math.isfinite(record[key]), key
        assert 0.0 <= record["reward_mean"] <= 1.0 and record["grad_norm"] > 0
    # Each step's update is synced to the sampler; the next step's rollouts use it (also across the
    # resume, where the restored checkpoint's weights are synced at start-up).
    assert [s["weights_version"] for s in steps] == [1, 2]
    assert [s["rollout_weights_version"] for s in steps] == [0, 1]
    assert [s["optimizer_steps"] for s in steps] == [1, 2]


def test_run_directory_holds_config_metrics_plot_checkpoints_and_summary(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["demo"]["framework"] == "verl" and config["demo"]["steps"] == 2
    overrides = config["verl_overrides"]
    assert "trainer.total_training_steps=2" in overrides and "trainer.v1.trainer_mode=arctic" in overrides
    assert config["arctic_rl"]["backend"]["kind"] == "reference"
    assert config["arctic_rl"]["backend"]["reference"]["model_path"] == str(
        (run_dir / "warm_start" / "hf").resolve()
    )
    assert (run_dir / "checkpoints" / "global_step_2" / "actor" / "checkpoint-2").is_dir()
    assert (run_dir / "reward_loss.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["framework"] == "verl"
    assert summary["steps"] == [1, 2] and summary["weights_version"] == [1, 2]
    for phase in ("before", "after"):
        assert summary[phase]["heldout"]["metric"] == "EX" and summary[phase]["heldout"]["total"] == 10
        assert summary[phase]["train"]["total"] == 16
    assert set(summary["seconds"]) >= {"grpo", "eval_after", "total"}


def test_accuracy_after_is_measured_on_the_final_checkpoint(interrupted_then_resumed):
    """The backend actor ends with verl's Ray cluster: the after-GRPO accuracy runs on a fresh
    in-process engine restored from the last checkpoint and synced to its sampler."""
    run_dir, *_ = interrupted_then_resumed
    versions = {(r["phase"], r["split"]): r["weights_version"] for r in MetricsLog(run_dir).records("eval")}
    assert versions[("after", "heldout")] == versions[("after", "train")] == 2  # the final step's weights
    assert versions[("before", "heldout")] == 2  # the warm start's 2 supervised steps

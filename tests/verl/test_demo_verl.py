"""`arctic-rl demo --framework verl` for real: verl 0.9.1's V1 trainer on a local Ray cluster, the
reference backend started by the trainer as a Ray actor in its own process, tiny settings. Warm
start, accuracy before, GRPO steps, a real SIGINT after step 1 leaving a checkpoint, `--resume`
finishing the run, and what the run directory holds (the checks every framework's demo shares live
in `tests/shared/demo_checks.py`). One module-scoped run: Ray and verl start-up dominate."""

from __future__ import annotations

import json
import os

import pytest
from arctic_rl_testbed.demo.run_log import MetricsLog
from demo_checks import (
    assert_interrupted_then_resumed,
    assert_real_grpo_steps,
    assert_run_directory,
    run_interrupted_then_resumed,
    tiny_options,
)


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo_verl") / "run"
    return run_dir, *run_interrupted_then_resumed(tiny_options("verl", run_dir))


def test_ctrl_c_leaves_a_checkpoint_and_resume_finishes(interrupted_then_resumed):
    # also: the accuracy after GRPO ran on the final step's weights, although the backend actor
    # ended with verl's Ray cluster (a fresh engine restored from the last checkpoint)
    assert_interrupted_then_resumed(*interrupted_then_resumed)


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
    assert_real_grpo_steps(interrupted_then_resumed[0])


def test_run_directory_holds_config_metrics_plot_checkpoints_and_summary(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    config = assert_run_directory(run_dir, "verl", step_override="trainer.total_training_steps=2")
    assert "trainer.v1.trainer_mode=arctic" in config["verl_overrides"]
    assert (run_dir / "checkpoints" / "arctic_backend" / "checkpoint-2").is_dir()
    assert len(list((run_dir / "verl_metrics").glob("*.jsonl"))) == 2  # verl's own log, per attempt


def test_rollout_reward_and_ex_are_those_of_verls_rollout_dump(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    for record in MetricsLog(run_dir).grpo_steps():
        dump = (run_dir / "rollouts" / f"{record['step']}.jsonl").read_text().splitlines()
        scores = [json.loads(line)["score"] for line in dump]
        assert len(scores) == 4  # 2 prompts x 2 rollouts
        assert record["rollout_ex"] == 100.0 * sum(s == 1.0 for s in scores) / 4
        assert record["reward_mean"] == pytest.approx(sum(scores) / 4)


def test_the_adapter_registers_its_demo_driver():
    # the core's demo finds the GRPO phase through the adapter's entry point (the core imports no adapter)
    from adapter_verl.demo_driver import run_grpo
    from arctic_rl_testbed.demo.drivers import load_driver, registered_frameworks

    assert registered_frameworks() == ["verl"]
    assert load_driver("verl") is run_grpo


@pytest.mark.parametrize("colocate", [False, True], ids=["separate", "colocated"])
def test_demo_server_flags_compose_into_verls_config(tmp_path, colocate):
    """`--server URL [--colocate]`: the demo's verl overrides compose (Hydra) into a run whose core
    config drives the Arctic on-prem API there, loading the warm-started model."""
    from pathlib import Path

    from adapter_verl.config import arctic_config_from_verl
    from adapter_verl.demo_driver import verl_overrides
    from adapter_verl.main import compose, with_arctic_defaults
    from arctic_rl_testbed.demo.options import DemoOptions

    options = DemoOptions(out=str(tmp_path), server="http://127.0.0.1:8123", colocate=colocate, steps=2)
    model = tmp_path / "warm_start" / "hf"
    overrides, _ = with_arctic_defaults(
        verl_overrides(options, train_file=tmp_path / "t.parquet", model_path=model, steps_per_epoch=4)
    )
    config = compose(overrides)
    cfg = arctic_config_from_verl(config, 2)
    assert (cfg.backend.kind, cfg.backend.host, cfg.backend.port) == ("http", "127.0.0.1", 8123)
    assert cfg.placement.colocate is colocate and cfg.model.name == str(Path(model).resolve())
    assert config.actor_rollout_ref.hybrid_engine is colocate  # verl's own field says it
    # verl's checkpoint folder is the Arctic training job's (adapter_verl.field_table)
    assert cfg.checkpoint.path == str(Path(config.trainer.default_local_dir).resolve())
    assert cfg.checkpoint.path.startswith(str(tmp_path.resolve()))


def test_colocated_demo_drives_an_arctic_server_through_the_real_client(wire, tmp_path):
    """`arctic-rl demo --framework verl --colocate --server URL --steps 2` against the suite's
    `arctic-rl serve --reference` in its own process: GRPO through verl's trainer, `ArcticBackend`
    and the real client over HTTP, sleep/wake every step; the weights version the sampler reports
    advances every step (0, 1 sampled; 1, 2 synced)."""
    from demo_checks import run_against_server

    mark = wire.request_count()
    run_against_server("verl", tmp_path / "run", wire.url, colocate=True)
    routes = [r["route"] for r in wire.requests(mark)]
    # colocated: every step's rollouts are followed by the replica handing the devices to training
    assert routes.count("/sleep-inference") >= 2 and routes.count("/wake-inference") >= 4
    assert all(r["status"] == 200 for r in wire.requests(mark))


def test_async_step_records_read_like_skyrls():
    """A separate-async step as verl's file logger wrote it in `arctic-rl demo --framework verl --async 1`
    (step 3 of 3: rows sampled at weights versions 1 and 2, trained at trainer version 2): the demo's
    record has the SkyRL demo's `async/*` names, and rollout_weights_version is the oldest trained one."""
    from adapter_verl.demo_driver import step_record

    logged = {
        "critic/rewards/mean": 0.25, "actor/pg_loss": -0.07, "actor/grad_norm": 0.5,
        "arctic/weights_version": 3.0, "arctic/rollout_weights_version": 1.0, "arctic/optimizer_steps": 3.0,
        "actor/async/max_staleness": 1.0, "actor/async/staleness_mean": 0.5, "actor/async/staleness_max": 1.0,
        "actor/async/staleness_min": 0.0, "actor/async/is_weight_mean": 1.00006, "actor/async/is_weight_max": 1.0073,
        "actor/async/is_weight_min": 0.9937, "actor/async/is_weight_clipped_fraction": 0.0,
    }  # fmt: skip
    record = step_record(logged, [1.0, 0.0, 0.0, 0.0])
    assert (record["weights_version"], record["rollout_weights_version"], record["optimizer_steps"]) == (
        3,
        1,
        3,
    )
    assert (
        record["rollout_weights_version"]
        == (record["optimizer_steps"] - 1) - record["async/weights_staleness_max"]
    )
    assert (record["async/max_staleness"], record["async/weights_staleness_mean"]) == (1.0, 0.5)
    assert record["async/is_weight_min"] == 0.9937 and record["rollout_ex"] == 25.0
    synchronous = step_record({k: v for k, v in logged.items() if "async" not in k}, [1.0])
    assert not [k for k in synchronous if k.startswith("async/")]

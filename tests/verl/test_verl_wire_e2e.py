"""verl over the wire: verl 0.9.1's real V1 trainer (`python -m adapter_verl.main`, trainer mode
`arctic`) drives `ArcticBackend` with the real arctic-platform 0.1.4 client over HTTP against
`arctic-rl serve --reference` in its own process (default fidelity profile: answers as 0.1.4; the
state guard on). verl's real layout: the trainer, the rank-0 worker and the rollout
replica build their own client object from the handle, sharing one `RayStateLedger`; prompts go
as text (the on-prem server takes no token ids).

Three runs, the slowest tests of the repository, so lean (tiny model, 2 steps, 2 prompts x 2):
- separate placement with validation on (`val_before_train`, `test_freq=1`);
- colocated (sleep/wake every step), saving a checkpoint at step 2;
- resumed from that checkpoint for step 3.
Each asserts the weights version every replica reports advances every step, and the exact
sleep/wake/sync sequence the server received (its `--request-log`)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("arctic_platform.client")
from wire_server import serve_reference

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE, REPLICAS = 2, 2, 8, 1
TINY_MODEL = {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
SYNC_COLOCATED = [
    "sleep-training(non_lp)",
    "wake-inference(['weights'])",
    "weight-sync",
    "wake-inference(['kv_cache'])",
    "reset-prefix-cache",
    "sleep-training(all)",
]
SYNC_SEPARATE = ["weight-sync", "reset-prefix-cache"]
RUN_SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl_wire")
    from arctic_rl_core.backends.reference.model import save_model_dir
    from arctic_rl_core.backends.reference.model_config import ReferenceModelConfig
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, preprocess
    from arctic_rl_core.envs.bird.sample import sample_dir

    # verl reads config.json and the tokenizer; the server builds the same model from this directory
    save_model_dir(root / "model", ReferenceModelConfig(**TINY_MODEL), seed=42)
    preprocess(sample_dir(root / "bird_cache"), root / "data", PreprocessOptions(), show_progress=False)
    return root


def _server(root: Path, name: str, *, colocate: bool):
    log = root / f"{name}-requests.jsonl"
    args = ["--num-threads", "1", "--request-log", str(log), "--colocate" if colocate else "--no-colocate"]
    return serve_reference(root / f"{name}-server", args=args), log


def _overrides(root: Path, server, *, name: str, colocate: bool, steps: int, validate: bool) -> list[str]:
    core = "++remote_backend.core."
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={root / 'data' / 'train.parquet'}",
        f"data.val_files={root / 'data' / 'dev.parquet'}",
        f"data.train_batch_size={TRAIN_BATCH}",
        "data.max_prompt_length=1024",
        f"data.max_response_length={MAX_RESPONSE}",
        "data.dataloader_num_workers=0",
        "data.shuffle=false",
        f"actor_rollout_ref.model.path={root / 'model'}",
        f"actor_rollout_ref.rollout.n={ROLLOUT_N}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "reward.num_workers=1",
        "reward.custom_reward_function.path=pkg://arctic_rl_core.envs.bird.reward",
        "reward.custom_reward_function.name=compute_score",
        # main's adapter runs one CPU forwarder and one rollout replica (n_gpus_per_node sizes the jobs)
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console]",
        f"trainer.val_before_train={str(validate).lower()}",
        f"trainer.test_freq={1 if validate else -1}",
        "trainer.save_freq=2",
        f"trainer.default_local_dir={root / f'{name}-ckpt'}",
        "trainer.resume_mode=auto",
        "ray_kwargs.ray_init.num_cpus=8",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # verl names the model (actor_rollout_ref.model.path): the server loads that directory
        *(o for o in server.overrides(core) if not o.startswith(f"{core}model.")),
        # main's verl mapping: the backend checkpoints under trainer.default_local_dir, colocation is
        # verl's hybrid engine
        f"actor_rollout_ref.hybrid_engine={str(colocate).lower()}",
        f"{core}placement.log_prob_gpus=1",  # use_kl_loss: reference log-probs from the log-prob job
        f"{core}zorro.enable=false",  # one prompt x 2 rollouts per micro-batch of 1 row
        f"remote_backend.trace_dir={root / f'{name}-trace{steps}'}",
    ]


def _run(root: Path, server, label: str, **kw) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0"}
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "adapter_verl.main", *_overrides(root, server, **kw)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    RUN_SECONDS[label] = time.monotonic() - start
    log = out.stdout + out.stderr
    (root / f"{label}.log").write_text(log)
    assert out.returncode == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
    left = server.destroy_all_jobs()
    assert left == [], f"the run left jobs {left} on the server"
    return log


def _control_routes(log: Path) -> list[str]:
    """The sleep/wake/sync/checkpoint calls the server received, in order (any client)."""
    names = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        route = entry["route"].lstrip("/")
        if route == "operation":
            route = entry["operation_type"]
        if route.startswith("job/") or route in (
            "initialize",
            "destroy",
            "status",
            "health",
            "forward",
            "forward-backward",
            "step",
            "generate",
        ):
            continue
        assert entry["status"] == 200, entry
        detail = entry.get("mode") or entry.get("tags") or entry.get("level")
        names.append(f"{route}({detail})" if detail is not None else route)
    return names


def _replica_versions(trace_dir: Path) -> dict[str, list[int]]:
    """Per replica, the weights version of every generate it served, in order."""
    versions: dict[str, list[int]] = {}
    for path in sorted(trace_dir.glob("rollout*-*.jsonl")):
        replica = path.name.split("-")[0]
        records = [json.loads(line) for line in path.read_text().splitlines()]
        versions.setdefault(replica, []).extend(
            r["weights_version"] for r in records if r["op"] == "generate"
        )
    return versions


def _update_weights_versions(trace_dir: Path) -> list[int]:
    from adapter_verl.trace import read_trace

    return [r["weights_version"] for r in read_trace(trace_dir) if r["op"] == "update_weights"]


def _step_metrics(log: str, step: int) -> dict[str, float]:
    lines = [line for line in log.splitlines() if re.search(rf"(^|\s)step:{step} - ", line)]
    assert lines, f"no metrics line for step {step}"
    metrics = {}
    for part in lines[-1].split(" - "):
        key, _, value = part.strip().rpartition(":")
        try:
            metrics[key] = float(value)
        except ValueError:
            continue
    return metrics


def _report_time(label: str) -> None:
    print(f"\nverl wire run {label}: {RUN_SECONDS[label]:.0f} s", file=sys.stderr)


def test_separate_placement_with_validation(workdir):
    served, log_path = _server(workdir, "separate", colocate=False)
    with served as server:
        log = _run(workdir, server, "separate", name="separate", colocate=False, steps=2, validate=True)
    _report_time("separate")
    # nothing sleeps when not colocated: start-up sync, then one sync after each step (and verl's
    # checkpoint at step 2, before its sync)
    routes = _control_routes(log_path)
    assert routes == SYNC_SEPARATE * 2 + ["save"] + SYNC_SEPARATE, routes
    trace = workdir / "separate-trace2"
    assert _update_weights_versions(trace) == [0, 2, 4]  # 2 mini-batches (optimizer steps) per step
    versions = _replica_versions(trace)
    assert sorted(versions) == [f"rollout{r}" for r in range(REPLICAS)]
    for replica, seen in versions.items():
        # validation before training and after each step, and the training rollouts, each on the
        # weights synced last: the version every replica reports advances with every step
        assert seen == sorted(seen) and set(seen) == {0, 2, 4}, (replica, seen)
    for step in (1, 2):
        metrics = _step_metrics(log, step)
        assert math.isfinite(metrics["actor/loss"]) and metrics["actor/grad_norm"] > 0
        assert metrics["arctic/rollout_weights_version"] == 2 * (step - 1)
        assert metrics["arctic/weights_version"] == 2 * step
    assert re.search(r"Initial validation metrics", log), "val_before_train did not run"
    # validation before training and after each of the 2 steps (test_freq=1), rewarded as in training
    assert len(re.findall(r"val-core/bird/reward/mean@1:\S+", log)) == 3


@pytest.fixture(scope="module")
def colocated(workdir):
    served, log_path = _server(workdir, "colocated", colocate=True)
    with served as server:
        log = _run(workdir, server, "colocated", name="colocated", colocate=True, steps=2, validate=False)
        _report_time("colocated")
        yield server, log_path, log


def test_colocated_sleeps_and_wakes_every_step_in_the_policy_order(workdir, colocated):
    _, log_path, log = colocated
    routes = _control_routes(log_path)
    save = routes.index("save")
    # start-up: verl sleeps both replicas (the first sends it, the second finds it asleep), the
    # worker syncs; each step: the replicas hand the devices to training, the worker syncs
    to_training = ["sleep-inference(1)", "wake-training"]
    expected = ["sleep-inference(1)", *SYNC_COLOCATED] + ([*to_training, *SYNC_COLOCATED] * 2)
    assert routes[:save] + routes[save + 1 :] == expected, routes
    trace = workdir / "colocated-trace2"
    assert _update_weights_versions(trace) == [0, 2, 4]
    versions = _replica_versions(trace)
    assert sorted(versions) == [f"rollout{r}" for r in range(REPLICAS)]
    for replica, seen in versions.items():
        # step 1 on the start-up weights, step 2 on those synced after step 1's 2 optimizer steps
        assert seen == sorted(seen) and set(seen) == {0, 2}, (replica, seen)
    for step in (1, 2):
        assert _step_metrics(log, step)["arctic/rollout_weights_version"] == 2 * (step - 1)


def test_colocated_resume_continues_from_the_checkpoint(workdir, colocated):
    server, log_path, _ = colocated
    sent = len(log_path.read_text().splitlines())
    log = _run(workdir, server, "resume", name="colocated", colocate=True, steps=3, validate=False)
    _report_time("resume")
    from adapter_verl.trace import read_trace

    trace = read_trace(workdir / "colocated-trace3")
    assert [r["step"] for r in trace if r["op"] == "step"] == [5, 6]
    assert re.search(r"(^|\s)step:3 - ", log) and not re.search(r"(^|\s)step:1 - ", log)
    lines = log_path.read_text().splitlines()[sent:]
    loads = [json.loads(line) for line in lines if json.loads(line)["route"] == "/load-checkpoint"]
    assert len(loads) == 1 and loads[0]["status"] == 200
    # the restored trainer is at 4 optimizer steps: the start-up sync serves version 4, step 3's sync 6
    assert _update_weights_versions(workdir / "colocated-trace3") == [4, 6]
    for seen in _replica_versions(workdir / "colocated-trace3").values():
        assert set(seen) == {4}

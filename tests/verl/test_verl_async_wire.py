"""verl 0.9.1's separate-async trainer through the adapter, end to end over the wire: `python -m
adapter_verl.main` with verl's own `trainer.v1.trainer_mode=separate_async` (the adapter's
`arctic_separate_async`), 3 GRPO steps through `ArcticBackend` and the real arctic-platform 0.1.4
client over HTTP to `arctic-rl serve --reference --no-colocate` in its own process.

verl's own staleness field (`trainer.v1.sampler.max_off_policy_threshold=2`: a trajectory may span
2 steps) is `async.max_staleness=1`; its prefetch window (`num_warmup_batches=1`) puts one batch of
prompts ahead of training, so step 2 trains rollouts sampled before step 1's update. Every check
reads what the server saw (its request log: the weights version each /generate sampled with, the
trainer version of each /forward-backward, a digest of every sequence both returned and trained),
and verl's own logged metrics. One run per module (Ray + TransferQueue start-up dominate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from verl_e2e_run import prepare_workdir, run_overrides, step_metrics
from wire_server import serve_reference

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE, STEPS = 2, 2, 8, 3
THRESHOLD = 2  # verl's max_off_policy_threshold: max_staleness = THRESHOLD - 1 (ppo_epochs=1)


def async_overrides(root: Path, server) -> list[str]:
    shape = {"train_batch": TRAIN_BATCH, "rollout_n": ROLLOUT_N, "max_response": MAX_RESPONSE}
    return [
        *run_overrides(root, **shape, steps=STEPS),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={root / 'ckpt'}",
        # verl's separate-async mode, as verl's own launchers set it
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.hybrid_engine=false",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "trainer.v1.separate_async.num_warmup_batches=1",
        f"trainer.v1.sampler.max_off_policy_threshold={THRESHOLD}",
        *("++remote_backend.core." + o for o in server.overrides(model=False)),
        f"remote_backend.trace_dir={root / 'trace'}",
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl_async_wire")
    prepare_workdir(root)
    requests_log = root / "requests.jsonl"
    args = ["--no-colocate", "--num-threads", "1", "--request-log", str(requests_log)]
    with serve_reference(root / "server", args=args, file_root=root) as server:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0"}
        out = subprocess.run(
            [sys.executable, "-m", "adapter_verl.main", *async_overrides(root, server)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        log = out.stdout + out.stderr
        (root / "run.log").write_text(log)
        assert out.returncode == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
        jobs = server.jobs()
    requests = [json.loads(line) for line in requests_log.read_text().splitlines()]
    return {"log": log, "requests": requests, "jobs": jobs, "root": root}


def test_the_adapter_selected_its_separate_async_trainer(run):
    assert "trainer.v1.trainer_mode=separate_async: now arctic_separate_async" in run["log"]
    assert run["jobs"] == {}  # the trainer shut its backend down after fit


def test_every_trained_rollout_was_sampled_within_the_staleness_bound(run):
    """From the server's own log: each trained row is a sequence some /generate returned, and the
    trainer's version when it trained it minus the sampler's version when it sampled it is in [0, 1]."""
    sampled: dict[str, int] = {}
    for entry in run["requests"]:
        if entry["route"] == "/generate":
            for row in entry["rollouts"]:
                sampled.setdefault(row, entry["weights_version"])
    trains = [e for e in run["requests"] if e["route"] == "/forward-backward"]
    assert [e["trainer_version"] for e in trains] == list(range(STEPS))  # one update per verl step
    staleness = []
    for entry in trains:
        assert len(entry["rollouts"]) == TRAIN_BATCH * ROLLOUT_N
        for row in entry["rollouts"]:
            assert row in sampled, "a trained row the server never generated"
            staleness.append(entry["trainer_version"] - sampled[row])
    assert min(staleness) >= 0 and max(staleness) <= THRESHOLD - 1
    # the prefetched batch (sampled with version 0) is trained at step 2 by the trainer at version 1:
    # generation really ran ahead of training
    assert max(staleness) == 1


def test_weights_reach_the_sampler_at_every_step_boundary(run):
    syncs = [e for e in run["requests"] if e.get("operation_type") == "weight-sync"]
    versions = [e["weights_version"] for e in run["requests"] if e["route"] == "/generate"]
    assert len(syncs) == STEPS + 1  # on_init_end, then after every step
    assert versions == sorted(versions) and set(versions) <= set(range(STEPS))


def test_verl_logged_the_versions_staleness_and_is_weights(run):
    for step in range(1, STEPS + 1):
        metrics = step_metrics(run["log"], step)
        assert metrics["arctic/weights_version"] == step
        assert metrics["actor/async/max_staleness"] == THRESHOLD - 1
        assert 0 <= metrics["actor/async/staleness_max"] <= THRESHOLD - 1
        # verl's own view of the same versions (the replicas report them in extra_fields)
        assert 0 <= metrics["training/off_policy/trajectory_staleness/max"] <= THRESHOLD - 1
        # the truncated IS weights (cap 2.0) went on the wire
        assert 0 < metrics["actor/async/is_weight_max"] <= 2.0
    assert step_metrics(run["log"], 2)["actor/async/staleness_max"] == 1

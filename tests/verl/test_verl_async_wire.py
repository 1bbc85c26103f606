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
import re
import subprocess
import sys
from pathlib import Path

import pytest
from wire_server import serve_reference, tiny_model_dir

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE, STEPS = 2, 2, 8, 3
THRESHOLD = 2  # verl's max_off_policy_threshold: max_staleness = THRESHOLD - 1 (ppo_epochs=1)
LEARNABLE_REWARD = Path(__file__).resolve().parents[1] / "shared" / "learnable_reward.py"
MODEL = {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}


def async_overrides(root: Path, server) -> list[str]:
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
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={LEARNABLE_REWARD}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={STEPS}",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={root / 'ckpt'}",
        "ray_kwargs.ray_init.num_cpus=8",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
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
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, preprocess
    from arctic_rl_core.envs.bird.sample import sample_dir

    tiny_model_dir(root / "model", seed=42, **MODEL)
    preprocess(sample_dir(root / "bird_cache"), root / "data", PreprocessOptions(), show_progress=False)
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


def _step_metrics(log: str, step: int) -> dict[str, float]:
    lines = [line for line in log.splitlines() if re.search(rf"(^|\s)step:{step} - ", line)]
    assert lines, f"no metrics line for step {step}"
    metrics = {}
    for part in lines[-1].split(" - "):
        key, _, value = part.strip().rpartition(":")
        value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value)  # verl logs numpy scalars by repr
        try:
            metrics[key] = float(value)
        except ValueError:
            continue
    return metrics


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
        metrics = _step_metrics(run["log"], step)
        assert metrics["arctic/weights_version"] == step
        assert metrics["actor/async/max_staleness"] == THRESHOLD - 1
        assert 0 <= metrics["actor/async/staleness_max"] <= THRESHOLD - 1
        # verl's own view of the same versions (the replicas report them in extra_fields)
        assert 0 <= metrics["training/off_policy/trajectory_staleness/max"] <= THRESHOLD - 1
        # the truncated IS weights (cap 2.0) went on the wire
        assert 0 < metrics["actor/async/is_weight_max"] <= 2.0
    assert _step_metrics(run["log"], 2)["actor/async/staleness_max"] == 1

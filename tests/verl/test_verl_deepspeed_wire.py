"""verl 0.9.1's real V1 trainer (`python -m adapter_verl.main`) through `ArcticBackend` and the real
arctic-platform 0.1.4 client over HTTP, against `arctic-rl serve --reference --trainer deepspeed`: the
training job is arctic-platform 0.1.4's own server code and `DeepSpeedWorker` on the CPU (its own
process); only sampling is the reference engine's (the stand-in for vLLM), and it receives the
worker's weights at every sync.

One run, colocated (verl's hybrid engine) on ZeRO-2, 2 steps: every step the worker's own offload and
reload (`/sleep-training` non_lp and all: `offload_non_lp_states`, `offload_to_cpu`; `/wake-training`:
`backload_to_gpu`) around the weight sync. ZeRO-2 because DeepSpeed offloads a ZeRO-3 job only with
its FusedAdam (a C++ op it would compile on a CPU); no KL loss here (the log-prob job on ZeRO-2 does not
start in 0.1.4; the KL family runs on ZeRO-3 in tests/skyrl/test_skyrl_deepspeed_wire.py). One row per
micro-batch (mini-batch 2 prompts x 2 rollouts, micro-batch 1, so the old log-probs' forward of the 4
rows splits into 4 one-row micro-batches too): the 0.1.4 pipeline never packs two rows together.
"""

from __future__ import annotations

import math
import time

import pytest
from verl_e2e_run import SYNC_COLOCATED, prepare_workdir, run_overrides, run_verl_main, step_metrics
from wire_server import serve_reference

pytest.importorskip("arctic_platform.client")

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE = 2, 2, 8


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    root = prepare_workdir(tmp_path_factory.mktemp("verl_deepspeed"))
    log_dir = root / "server"
    requests = log_dir / "requests.jsonl"
    with serve_reference(log_dir, args=["--trainer", "deepspeed", "--request-log", str(requests)]) as server:
        core = "++remote_backend.core."
        overrides = [
            *run_overrides(
                root, train_batch=TRAIN_BATCH, rollout_n=ROLLOUT_N, max_response=MAX_RESPONSE, steps=2
            ),
            "actor_rollout_ref.hybrid_engine=true",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.entropy_coeff=0.01",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            f"trainer.default_local_dir={root / 'ckpt'}",
            *server.overrides(core, model=False),
            f"{core}deepspeed.zero_stage=2",
            f"{core}zorro.enable=false",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # flash-attention: a GPU kernel
            f"{core}kernels.use_liger=false",  # Liger: GPU kernels
        ]
        start = time.monotonic()
        code, log = run_verl_main(root, overrides, log_name="verl.log", timeout=900)
        print(
            f"\nverl run on the 0.1.4 DeepSpeed worker (colocated, 2 steps): {time.monotonic() - start:.0f} s"
        )
        assert code == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
        assert server.jobs() == {}
        return log, server.requests()


def test_the_real_worker_trains_both_steps(colocated):
    log, _ = colocated
    for step in (1, 2):
        metrics = step_metrics(log, step)
        assert math.isfinite(metrics["actor/loss"]) and metrics["actor/grad_norm"] > 0
        assert max(abs(metrics["critic/advantages/max"]), abs(metrics["critic/advantages/min"])) > 0.1
        assert metrics["arctic/weights_version"] == step  # one optimizer step per training step


def test_each_step_offloads_and_reloads_the_worker_around_the_sync(colocated):
    _, requests = colocated
    routes = []
    for entry in requests:
        assert entry["status"] == 200, entry
        route = entry["route"].lstrip("/")
        route = entry.get("operation_type", route) if route == "operation" else route
        detail = entry.get("mode") or entry.get("tags") or entry.get("level")
        if route in (
            "sleep-training",
            "wake-training",
            "weight-sync",
            "wake-inference",
            "reset-prefix-cache",
        ):
            routes.append(f"{route}({detail})" if detail is not None else route)
    # the start-up sync, then per step: the devices to training (wake), the update, the sync
    assert routes[: len(SYNC_COLOCATED)] == SYNC_COLOCATED
    rest = routes[len(SYNC_COLOCATED) :]
    assert rest == ["wake-training", *SYNC_COLOCATED] * 2, routes

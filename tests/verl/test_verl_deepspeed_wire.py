"""verl 0.9.1's real V1 trainer (`python -m adapter_verl.main`) through `ArcticBackend` and the real
arctic-platform 0.1.4 client over HTTP, against `arctic-rl serve --reference --trainer deepspeed`: the
training and log-prob jobs are arctic-platform 0.1.4's own server code and `DeepSpeedWorker`s on the CPU
(one process each); only sampling is the reference engine's (the stand-in for vLLM), and it receives the
worker's weights at every sync.

One run, colocated (verl's hybrid engine) on ZeRO-2, 2 steps (~5-11 min on a loaded 2-core machine):
- every step the workers' own offload and reload (`/sleep-training` non_lp and all: `offload_non_lp_states`,
  `offload_to_cpu`; `/wake-training`: `backload_to_gpu`; the log-prob job's `/wake-log-prob` and
  `/sleep-log-prob`) around the weight sync, in the same order the torch trainer's run receives them
  (tests/verl/test_verl_wire_e2e.py);
- the KL loss: reference log-probs from the 0.1.4 log-prob job, which the client starts on ZeRO-0 under
  ZeRO-2 training (0.1.4 builds it without an optimizer: DeepSpeed refuses ZeRO-1/2 then);
- a checkpoint at step 2 with an HF export (DeepSpeed's checkpoint, the worker's `export_hf_checkpoint`).
ZeRO-2 because DeepSpeed offloads a ZeRO-3 job only with its FusedAdam (a C++ op it would compile on a
CPU; the ZeRO-3 family runs in tests/skyrl/test_skyrl_deepspeed_wire.py). Training micro-batches hold one
row (the built-in verl_grpo loss reads the 0.1.4 pipeline's packed layout, which sdpa cannot keep apart);
the log-prob forwards hold all 4 rows, sent unpacked (`meta.cu_seqlens=None`): at step 1 the policy is
the reference model, so the KL between the training job's per-row log-probs and the log-prob job's 4-row
forward is bf16 noise only if no row saw another.
"""

from __future__ import annotations

import math
import time

import pytest
from verl_e2e_run import (
    REF_LOGPROBS,
    SHUT_DOWN,
    START_UP,
    SYNC_COLOCATED,
    TO_TRAINING,
    control_routes,
    prepare_workdir,
    run_overrides,
    run_verl_main,
    step_metrics,
)
from wire_server import serve_reference

pytest.importorskip("arctic_platform.client")

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE = 2, 2, 8
ROWS = TRAIN_BATCH * ROLLOUT_N


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
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={ROWS}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={ROWS}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # the whole batch: one optimizer step per step
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.entropy_coeff=0.01",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=2",
            f"trainer.default_local_dir={root / 'ckpt'}",
            *server.overrides(core, model=False),
            f"{core}deepspeed.zero_stage=2",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",  # verl owns it
            f"{core}zorro.enable=false",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # flash-attention: a GPU kernel
            f"{core}kernels.use_liger=false",  # Liger: GPU kernels
        ]
        start = time.monotonic()
        code, log = run_verl_main(root, overrides, log_name="verl.log", timeout=900)
        print(
            f"\nverl run on the 0.1.4 DeepSpeed workers (colocated, KL, 2 steps): {time.monotonic() - start:.0f} s"
        )
        assert code == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
        assert server.jobs() == {}
        return root, log, server.requests()


def test_the_real_workers_train_both_steps(colocated):
    _, log, _ = colocated
    for step in (1, 2):
        metrics = step_metrics(log, step)
        assert math.isfinite(metrics["actor/loss"]) and metrics["actor/grad_norm"] > 0
        assert max(abs(metrics["critic/advantages/max"]), abs(metrics["critic/advantages/min"])) > 0.1
        assert metrics["arctic/weights_version"] == step  # one optimizer step per training step


def test_the_kl_loss_reads_the_log_prob_jobs_unpacked_rows(colocated):
    _, log, _ = colocated
    first, second = step_metrics(log, 1), step_metrics(log, 2)
    print(
        f"\nKL loss (low_var_kl): step 1 {first['actor/kl_loss']:.2e}, step 2 {second['actor/kl_loss']:.2e}"
    )
    # step 1: the policy is the reference model; the log-prob job's 4-row forward agrees with the training
    # job's one-row micro-batches (packed, rows 2-4 of such a forward are 0.16-0.28 nats off)
    assert 0.0 <= first["actor/kl_loss"] < 1e-3
    # step 2: after one update the policy has moved away from the frozen reference
    assert second["actor/kl_loss"] > first["actor/kl_loss"]


def test_each_step_offloads_and_reloads_the_workers_in_the_torch_trainers_order(colocated):
    _, _, requests = colocated
    # the same sequence as the torch trainer's colocated run (test_verl_wire_e2e), without its validation:
    # start-up (the log-prob job sleeps until needed, the replica hands the devices to training, the start-up
    # sync), then per step sampling, the devices to training, reference log-probs, the update and the sync
    # (the step-2 checkpoint before it)
    step = ["generate", *TO_TRAINING, *REF_LOGPROBS]
    start = [*START_UP, "sleep-log-prob", "sleep-inference(2)", *SYNC_COLOCATED]
    expected = [*start, *step, *SYNC_COLOCATED, *step, "save", *SYNC_COLOCATED, *SHUT_DOWN]
    assert control_routes(requests) == expected


def test_the_step_2_checkpoint_is_deepspeeds_with_an_hf_export(colocated):
    root, _, _ = colocated
    (folder,) = (root / "ckpt" / "arctic_backend").glob("checkpoint-*")
    tag = (folder / "latest").read_text().strip()  # DeepSpeed's own pointer to its tag folder
    assert list((folder / tag).glob("*model_states.pt")) and list((folder / tag).glob("*optim_states.pt"))
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (folder / "hf" / name).is_file(), name

"""arctic-platform 0.1.4's own jobs as its real client asks for them from arctic-rl's configuration:
the `/initialize` bodies are the real client's (`ArcticRLConfig.to_client_config().to_onprem(job)`),
handed to the 0.1.4 server's own `/initialize` and routes (`ServerJobs`), each rank a real
`DeepSpeedWorker` in its own process.

- The log-prob (reference) job on ZeRO-1, 2 and 3, each with a reference forward as the KL loss needs it.
  ZeRO-1 and 2 fail today (issue 28 item 3, s5-serverfix): the 0.1.4 worker builds the log-prob engine
  without an optimizer and DeepSpeed refuses stages 1 and 2 without one.
- Optimizer offload on ZeRO-2 (`deepspeed.offload_optimizer`) against the same job without offload:
  the same loss, gradient norm and step.

Every configuration here sets what a CPU needs (flash-attention, ZoRRo and Liger are GPU kernels):
`kernels.attn_implementation=sdpa`, `zorro.enable=false`, `kernels.use_liger=false`. Each job start
costs 10-20 s on 2 cores.
"""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.config import load_config
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    with_response_logprobs,
)
from arctic_rl_testbed.reference.deepspeed_backend import payload_dict
from arctic_rl_testbed.reference.deepspeed_server_jobs import ServerJobs
from wire_server import tiny_model_dir

CPU_KERNELS = (
    "backend.kind=http",
    "kernels.attn_implementation=sdpa",
    "zorro.enable=false",
    "kernels.use_liger=false",
)
SEED = 5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-model"), SEED)


def _body(model_dir, tmp_path, job: str, *overrides: str) -> dict:
    cfg = load_config(
        None,
        [
            f"model.name={model_dir}",
            f"checkpoint.path={tmp_path}",
            f"determinism.seed={SEED}",
            *CPU_KERNELS,
            *overrides,
        ],
    )
    return cfg.to_client_config().to_onprem(job)


def _samples() -> list[RolloutSample]:
    g = torch.Generator().manual_seed(1)
    return [
        RolloutSample(
            prompt_ids=torch.randint(10, 900, (4,), generator=g).tolist(),
            response_ids=torch.randint(10, 900, (3 + i,), generator=g).tolist(),
            advantages=[1.0 if i % 2 else -1.0] * (3 + i),
        )
        for i in range(2)
    ]


def _spec(**overrides) -> PayloadSpec:
    return PayloadSpec(
        pad_token_id=0, max_prompt_len=4, max_response_len=4, rollout_n=2, temperature=1.0, **overrides
    )


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_log_prob_job_answers_a_reference_forward_on_zero_stage(stage, model_dir, tmp_path):
    """The 0.1.4 log-prob job has no optimizer, and DeepSpeed asserts 'zero stage N requires an optimizer' for
    N = 1, 2: arctic-rl's client config gives it ZeRO-0 then, and ZeRO-3 (sharded weights) under ZeRO-3."""
    body = _body(
        model_dir,
        tmp_path,
        "log_prob",
        f"deepspeed.zero_stage={stage}",
        "placement.log_prob_gpus=1",
        "loss.use_kl_loss=true",
    )
    assert body["log_prob_config"]["zero_optimization"]["stage"] == (3 if stage == 3 else 0)
    jobs = ServerJobs(training_gpus=1, log_prob_gpus=1)
    try:
        job = jobs.initialize(body)["job_id"]
        assert jobs.state.jobs[job]["engine"] == "deepspeed"
        spec = _spec()
        forward = build_forward_payload(_samples()[:1], spec)  # one row: no packing across rows
        logprobs = jobs.forward(job, payload_dict(forward))["batch"]["logprobs"]
        real = forward.batch["attention_mask"][0].bool()
        last = int(real.nonzero().max())
        values = logprobs[0, real][:-1] if last else logprobs[0, real]
        assert torch.isfinite(values.float()).all() and (values.float() < 0).all()
    finally:
        jobs.close()


def _train_once(jobs: ServerJobs, body: dict) -> tuple[dict, dict, torch.Tensor]:
    job = jobs.initialize(body)["job_id"]
    gas = body["ds_config"]["gradient_accumulation_steps"]
    spec = _spec(grad_accum_steps=gas)
    samples = _samples()
    forward = build_forward_payload(samples, spec)
    old = jobs.forward(job, payload_dict(forward))["batch"]["logprobs"]
    from arctic_rl_core.wire import response_logprobs

    values, _ = response_logprobs(old.float(), forward, spec)
    train = build_train_payload(with_response_logprobs(samples, values, field="old_logprobs"), spec)
    trained = jobs.forward_backward(job, payload_dict(train))
    stepped = jobs.step(job)
    after = jobs.forward(job, payload_dict(forward))["batch"]["logprobs"]
    return trained, stepped, after


def test_optimizer_offload_on_zero2_trains_as_without_it(model_dir, tmp_path):
    common = (
        "deepspeed.zero_stage=2",
        "batch.prompts_per_step=1",
        "batch.rollouts_per_prompt=2",
        "batch.micro_batch_size_per_gpu=1",  # one row per micro-batch: no packing across rows
        "optimizer.lr=0.001",
    )
    results = {}
    for offload in (False, True):
        body = _body(
            model_dir, tmp_path / str(offload), "training", *common, f"deepspeed.offload_optimizer={offload}"
        )
        assert ("offload_optimizer" in body["ds_config"]["zero_optimization"]) is offload
        jobs = ServerJobs(training_gpus=1, log_prob_gpus=0)
        try:
            results[offload] = _train_once(jobs, body)
            # arctic-rl's client config asks for torch_adam itself unless the optimizer is offloaded (where
            # DeepSpeed's CPU Adam is the GPU node's right choice); only then does the CPU shim add it
            assert jobs.cpu_additions["training"] == (["optimizer.params.torch_adam"] if offload else [])
        finally:
            jobs.close()
    (plain_train, plain_step, plain_after), (off_train, off_step, off_after) = results[False], results[True]
    assert plain_train["avg_loss"] == off_train["avg_loss"]  # the same forward, before any step
    assert plain_step["metrics"]["grad_norm"] > 0
    assert off_step["metrics"]["grad_norm"] == pytest.approx(plain_step["metrics"]["grad_norm"], rel=1e-3)
    assert off_step["metrics"]["last_lr"] == plain_step["metrics"]["last_lr"] == 0.001
    attention = torch.ones_like(plain_after, dtype=torch.bool)
    moved = (off_after.float() - plain_after.float())[attention].abs().max()
    assert moved < 0.02  # the same AdamW step, the optimizer state on the CPU or not (bf16 weights)

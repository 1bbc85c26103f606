"""arctic-platform 0.1.4's own in-process Ray server, under a local Ray on the CPU, driven by
`ArcticBackend` and the real 0.1.4 client (`protocol="ray"`): its state actor
(`ArcticRLRayServerState`), its `ArcticRLRayServer` and its `DeepSpeedWorker` actors, with the
real-worker harness's CPU shims (`deepspeed_cpu_shims`) installed in every Ray worker process by Ray's
`worker_process_setup_hook`. Ray gets two logical GPUs (the workers ask for one each; the shims keep
them on the CPU); no sampling job (vLLM does not run on a CPU).

The issue-28 defects seen through it, each fixed by the translation / wire / compat layer:
- the log-prob job on ZeRO-2 (its own stage: 0) starts; with MASTER_PORT exported both jobs get their own
  rendezvous port;
- the rows of one forward do not see each other with sdpa (meta.cu_seqlens: rows unpacked);
- log-probs are fp32 where no fused cross-entropy kernel runs;
- the server's blocking ops no longer stall the caller's event loop: health and the loop answer while
  a long forward runs, and request_timeout bounds it.

One server for the module (its two jobs start in ~30-90 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")
ray = pytest.importorskip("ray")
from arctic_rl_core.backends import arctic_compat  # noqa: E402
from arctic_rl_core.backends.arctic import ArcticBackend  # noqa: E402
from arctic_rl_core.backends.arctic_errors import ArcticTimeoutError  # noqa: E402
from arctic_rl_core.config import load_config  # noqa: E402
from arctic_rl_core.wire import (  # noqa: E402
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    response_logprobs,
)
from arctic_rl_testbed.reference import deepspeed_cpu_shims  # noqa: E402
from arctic_rl_testbed.reference.deepspeed_server_jobs import free_port  # noqa: E402
from arctic_rl_testbed.reference.engine import ReferenceBackend  # noqa: E402

P, R = 8, 8
ROWS = 4
BF16_NOISE = 0.06  # nats: what bf16 rounding of log-probs alone can move a token by on this model


def _samples(n: int, seed: int, prompt: int = 3, response: int = 2) -> list[RolloutSample]:
    g = torch.Generator().manual_seed(seed)
    return [
        RolloutSample(
            prompt_ids=torch.randint(10, 900, (prompt + i % (P - prompt + 1),), generator=g).tolist(),
            response_ids=torch.randint(10, 900, (response + i % (R - response + 1),), generator=g).tolist(),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real 0.1.4 Ray server with a training job (ZeRO-2) and a log-prob job, MASTER_PORT exported."""
    engine = ReferenceBackend()
    model_dir = tmp_path_factory.mktemp("tiny-model")
    engine._trainer.save_pretrained(str(model_dir))
    engine.tokenizer.save_pretrained(str(model_dir))
    pad = engine.pad_token_id
    asyncio.run(engine.shutdown())

    cfg = load_config(
        None,
        [
            "backend.kind=ray",
            f"model.name={model_dir}",
            f"checkpoint.path={tmp_path_factory.mktemp('ckpt')}",
            "placement.training_gpus=1",
            "placement.log_prob_gpus=1",
            "loss.use_kl_loss=true",
            "deepspeed.zero_stage=2",
            "kernels.attn_implementation=sdpa",
            "zorro.enable=false",
            "zorro.load_balancer=false",  # it imports tensordict (arctic-platform[rl], not installed here)
            "loss.loss_fn=arctic_rl_core",
            "kernels.use_liger=false",
            "kernels.gradient_checkpointing=false",
            "arctic_inference.enable=false",
            "batch.prompts_per_step=2",
            "batch.rollouts_per_prompt=2",
            f"batch.max_prompt_length={P}",
            f"batch.max_response_length={R}",
        ],
    )
    client_config = cfg.to_client_config().model_copy(update={"sampling_gpus": 0})  # no vLLM on a CPU
    port = free_port()
    saved_port = os.environ.get("MASTER_PORT")
    os.environ["MASTER_PORT"] = str(port)  # as on a cluster node that exports it
    if ray.is_initialized():
        ray.shutdown()
    for attempt in (1, 2):  # Ray waits 30 s (hard-coded) for its raylet: a loaded machine can miss that once
        try:
            ray.init(
                num_cpus=4,
                num_gpus=2,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={
                    "env_vars": dict(deepspeed_cpu_shims.WORKER_ENV),
                    "worker_process_setup_hook": f"{deepspeed_cpu_shims.__name__}.install",
                },
            )
            break
        except Exception as error:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(error):
                raise
    import arctic_platform.client.base as client_base

    gate = client_base.require_any_dep_group  # the client's own check for the GPU extras (vLLM, Liger...)
    client_base.require_any_dep_group = lambda *extras: None
    backend = None
    try:
        with deepspeed_cpu_shims.extras_gate_open():
            started = time.perf_counter()
            backend = ArcticBackend.create(client_config)
            startup_s = time.perf_counter() - started
        transport = backend._client.transport
        server = transport._server

        def on_workers(workers, fn):
            return ray.get([w.__ray_call__.remote(fn) for w in workers])

        yield SimpleNamespace(
            cfg=cfg,
            backend=backend,
            transport=transport,
            server=server,
            pad=pad,
            model_dir=str(model_dir),
            port=port,
            startup_s=startup_s,
            training=lambda fn: on_workers(server.training_workers, fn),
            log_prob=lambda fn: on_workers(server.log_prob_workers, fn),
        )
    finally:
        if backend is not None:
            asyncio.run(backend.shutdown())
        client_base.require_any_dep_group = gate
        ray.shutdown()
        if saved_port is None:
            os.environ.pop("MASTER_PORT", None)
        else:
            os.environ["MASTER_PORT"] = saved_port


def _spec(server, **changes) -> PayloadSpec:
    import dataclasses

    spec = PayloadSpec.from_config(server.cfg, pad_token_id=server.pad)
    return dataclasses.replace(spec, **changes)


def _forward(server, samples, spec, *, reference_model: bool) -> torch.Tensor:
    payload = build_forward_payload(samples, spec)
    out = asyncio.run(server.backend.forward(payload, reference_model=reference_model))
    values, mask = response_logprobs(out.logprobs_B_S, payload, spec)
    return values.double(), mask, out.logprobs_B_S.dtype


def test_log_prob_job_runs_zero_0_beside_zero_2_training_on_ports_of_its_own(server):
    """0.1.4 builds the log-prob engine without an optimizer (ZeRO-1/2 assert there) and gives both
    jobs the exported MASTER_PORT (the second rendezvous would collide): both jobs run."""
    assert server.training(lambda w: w.engine.zero_optimization_stage()) == [2]
    assert server.log_prob(lambda w: w.engine.zero_optimization_stage()) == [0]
    assert server.training(lambda w: w.master_port) == [server.port]
    assert server.log_prob(lambda w: w.master_port) == [server.port + arctic_compat.LOG_PROB_PORT_OFFSET]
    print(f"real Ray server: both jobs started in {server.startup_s:.0f} s (2 cores, under load)")


def _gaps(server, batched_rows, reference_model: bool, baseline) -> tuple[float, float]:
    """max |log-prob of a row in `batched_rows` - the same row's `baseline`|, rows sent unpacked (the
    translation) and packed (0.1.4's default, without meta.cu_seqlens)."""
    spec = _spec(server)
    assert spec.rows_unpacked  # sdpa, ZoRRo off
    gaps = []
    for current in (spec, _spec(server, rows_unpacked=False)):
        batched, mask, _ = _forward(server, batched_rows, current, reference_model=reference_model)
        gaps.append(float((batched - baseline)[mask].abs().max()))
    return gaps[0], gaps[1]


def test_rows_of_one_log_prob_forward_do_not_see_each_other(server):
    """The log-prob job has no gradient accumulation: the rows of a forward share one micro-batch."""
    samples = _samples(ROWS, seed=1)
    one = _one_row(_spec(server))
    per_row = torch.cat([_forward(server, [s], one, reference_model=True)[0] for s in samples])
    unpacked, packed = _gaps(server, samples, True, per_row)
    print(
        f"log-prob job, {ROWS} rows: max |batched - per row| = {unpacked:.4f} nats unpacked, {packed:.4f} packed"
    )
    assert unpacked < 1e-3  # the same rows, the same math
    assert packed > BF16_NOISE  # the defect this pins: packed rows attend to each other


def test_rows_of_one_training_micro_batch_do_not_see_each_other(server):
    """The training job splits a rank's rows into its accumulation steps (4 here): 8 rows put 2 in each
    micro-batch, against the same rows 1 per micro-batch."""
    samples = _samples(2 * ROWS, seed=5)
    spec = _spec(server)
    assert spec.grad_accum_steps == ROWS
    alone = torch.cat(
        [_forward(server, samples[i : i + ROWS], spec, reference_model=False)[0] for i in (0, ROWS)]
    )
    unpacked, packed = _gaps(server, samples, False, alone)
    print(
        f"training job, 2 rows per micro-batch: max |gap| = {unpacked:.4f} nats unpacked, {packed:.4f} packed"
    )
    assert unpacked < 1e-3
    assert packed > BF16_NOISE


def _one_row(spec: PayloadSpec) -> PayloadSpec:
    """The spec for one-row payloads (one row per data-parallel rank and accumulation step)."""
    import dataclasses

    return dataclasses.replace(spec, grad_accum_steps=1, dp_size=1)


def test_log_probs_are_fp32_where_no_fused_cross_entropy_runs(server):
    """sdpa: no flash-attn cross-entropy kernel, so the translation asks for fp32 logits; against the
    same bf16 model's log-softmax in float64, computed here."""
    from transformers import AutoModelForCausalLM

    samples = _samples(1, seed=2, prompt=P, response=R)  # one full row: no padding anywhere
    spec = _one_row(_spec(server))
    assert spec.logits_compute_in_fp32
    fp32, mask, _ = _forward(server, samples, spec, reference_model=True)
    bf16_spec = _one_row(_spec(server, logits_compute_in_fp32=False))  # what the translation sent before
    bf16, _, _ = _forward(server, samples, bf16_spec, reference_model=True)
    model = AutoModelForCausalLM.from_pretrained(
        server.model_dir, dtype=torch.bfloat16, attn_implementation="sdpa"
    )
    ids = torch.tensor([samples[0].prompt_ids + samples[0].response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits.double()
    exact = torch.log_softmax(logits, -1)[0, P - 1 : -1].gather(-1, ids[0, P:, None])[:, 0]
    fp32_error = float((fp32[0] - exact)[mask[0]].abs().max())
    bf16_error = float((bf16[0] - exact)[mask[0]].abs().max())
    print(f"max |log-prob - float64| (nats): fp32 logits {fp32_error:.5f}, bf16 {bf16_error:.4f}")
    assert fp32_error < 1e-3 < bf16_error


def _long_forward(server):
    """A forward of the training job that takes a while on the CPU (64 full rows)."""
    spec = _spec(server)
    payload = build_forward_payload(_samples(64, seed=3, prompt=P, response=R), spec)
    return payload


async def _probe_during(server, call_step) -> dict:
    """Start `call_step()` and, right behind it on the same loop, the server's health: the health call's
    latency from when it was issued, whether it answered before the step returned, and the step's time."""
    started = time.perf_counter()
    step = asyncio.ensure_future(call_step())
    health = asyncio.ensure_future(server.server.health())
    await health
    health_s, health_during = time.perf_counter() - started, not step.done()
    await step
    return {"health_s": health_s, "health_during": health_during, "step_s": time.perf_counter() - started}


def test_health_answers_while_a_step_runs_and_the_deadline_holds(server):
    from arctic_platform.client.transport import Request
    from arctic_platform.client.transports.onprem_ray import RayTransport

    payload = _long_forward(server)
    job = server.backend._client.jobs.training
    body = {"batch": payload.batch, "meta": payload.meta, "processing": payload.processing}

    async def blocking():  # 0.1.4's own RayTransport.acall: the server coroutine on this loop
        return await RayTransport.acall(server.transport, Request("forward", job, dict(body), binary=True))

    async def compat():
        return await server.backend.forward(payload)

    before = asyncio.run(_probe_during(server, blocking))
    after = asyncio.run(_probe_during(server, compat))
    print(
        "health issued with a 64-row forward: 0.1.4's transport "
        f"{before['health_s'] * 1000:.0f} ms (step {before['step_s'] * 1000:.0f} ms, answered during it: "
        f"{before['health_during']}); compat {after['health_s'] * 1000:.1f} ms (step {after['step_s'] * 1000:.0f} "
        f"ms, during: {after['health_during']})"
    )
    assert not before["health_during"]  # 0.1.4: the loop was blocked until the step returned
    assert after["health_during"]  # compat: answered while the step ran

    config = server.backend._client.config
    saved = config.request_timeout
    # an eighth of the forward's own measured time (39 ms with nothing else running: a fixed 50 ms was
    # longer than the whole step there and the deadline never fired)
    config.request_timeout = min(after["step_s"], before["step_s"]) / 8
    try:
        with pytest.raises(
            ArcticTimeoutError, match=r"'forward' on training job .* at the in-process Ray server"
        ):
            asyncio.run(server.backend.forward(payload))
    finally:
        config.request_timeout = saved
    asyncio.run(
        server.backend.forward(build_forward_payload(_samples(ROWS, seed=4), _spec(server)))
    )  # still serves

"""The reference HTTP server's default profile answers as arctic-platform 0.1.4's server does where
a stricter double would refuse, and its state guard (separate, on by default) refuses what 0.1.4
would do silently wrong. Each test is a row of the fidelity table (docs/reference-backend.md). In-process (aiohttp test
client, one engine per test); the same profile behind `arctic-rl serve --reference` is what every
wire run drives."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from arctic_platform import wire
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.fidelity import Fidelity, ServerProfile
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

NAME = REFERENCE_MODEL_NAME
STRICT = Fidelity(profile=ServerProfile.STRICT)
ZERO0_BF16_FP32 = {
    "train_micro_batch_size_per_gpu": 1,
    "bf16": {"enabled": True},
    "data_types": {"grad_accum_dtype": "fp32"},
    "zero_optimization": {"stage": 0},
}


_FILE_ROOT: list[Path] = []


@pytest.fixture(autouse=True)
def _file_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The server touches files only under its root: the session's base folder holds every tmp_path.
    _FILE_ROOT[:] = [tmp_path_factory.getbasetemp()]


def _serve(test, fidelity: Fidelity | None = None):
    async def main():
        server = ReferenceServer(
            ReferenceEngineSettings(num_threads=1), fidelity=fidelity, file_root=_FILE_ROOT[0]
        )
        async with TestClient(TestServer(server.application())) as client:
            await test(client, server)

    asyncio.run(main())


async def _init(client, job_type, **extra):
    response = await client.post("/initialize", json={"model_name": NAME, "job_type": job_type, **extra})
    return response.status, await _body(response)


async def _body(response):
    if response.content_type == "application/octet-stream":
        return wire.loads(await response.read())
    if response.content_type == "application/json":
        return await response.json()
    return await response.text()


async def _wire_post(client, path, job_id, body):
    response = await client.post(
        path,
        params={"job_id": job_id},
        data=wire.dumps(body),
        headers={"Content-Type": "application/octet-stream"},
    )
    return response.status, await _body(response)


async def _post(client, path, job_id, body=None):
    response = await client.post(path, params={"job_id": job_id}, json=body or {})
    return response.status, await _body(response)


def _train_body(engine: ReferenceBackend, advantage: float) -> dict:
    spec = PayloadSpec(
        pad_token_id=engine.pad_token_id, max_prompt_len=4, max_response_len=3, rollout_n=1, temperature=1.0
    )
    samples = [
        RolloutSample(
            prompt_ids=[11, 12, 13], response_ids=[21, 22], advantages=advantage, old_logprobs=[-2.0] * 2
        )
    ]
    payload = build_train_payload(samples, spec)
    return {"batch": payload.batch, "meta": payload.meta, "processing": payload.processing}


def test_step_ignores_learning_rate_and_unknown_keys_and_steps_without_gradients(tmp_path):
    """0.1.4's StepRequest ignores extra keys and its handler never applies `learning_rate`; a step
    with no forward-backward before it is a DeepSpeed step over zero gradients (advances the step)."""

    async def test(client, server):
        assert (await _init(client, "training", checkpoint_path=str(tmp_path)))[0] == 200
        status, body = await _post(client, "/step", 1, {"learning_rate": 5.0, "bogus": True})
        assert status == 200, body
        assert body["metrics"]["last_lr"] == pytest.approx(server.engine.settings.optimizer.lr)
        status, saved = await _post(client, "/save", 1, {"step": 1, "unknown_field": 1})
        assert status == 200 and saved["global_step"] == 1  # the zero-gradient step counted
        status, _ = await _post(client, "/save", 1, {"checkpoint_type": "weights_only"})
        assert status == 200  # accepted for Cortex parity, unused

    _serve(test)

    async def strict(client, server):
        await _init(client, "training", checkpoint_path=str(tmp_path / "strict"))
        status, body = await _post(client, "/step", 1, {"bogus": True})
        assert status == 422 and "unknown keys ['bogus']" in body["detail"]
        status, body = await _post(client, "/step", 1, {"learning_rate": 5.0})
        assert status == 400 and "ignores this argument" in body["detail"]
        status, body = await _post(client, "/step", 1, {})
        assert status == 409 and "without forward_backward" in body["detail"]

    _serve(strict, STRICT)


def test_initialize_accepts_training_config_and_each_jobs_own_seed(tmp_path):
    async def test(client, server):
        assert (await _init(client, "sampling", seed=7))[0] == 200
        status, body = await _init(
            client, "training", seed=8, checkpoint_path=str(tmp_path), training_config={"sp_size": 1}
        )
        assert status == 200, body

    _serve(test)

    async def strict(client, server):
        await _init(client, "sampling", seed=7)
        status, body = await _init(client, "training", seed=8, checkpoint_path=str(tmp_path))
        assert status == 400 and "share one reference engine" in body["detail"]
        status, body = await _init(
            client, "training", seed=7, checkpoint_path=str(tmp_path), training_config={"sp_size": 1}
        )
        assert status == 400 and "training_config" in body["detail"]

    _serve(strict, STRICT)


def test_deepspeed_rejects_zero0_bf16_with_fp32_accumulation(tmp_path):
    """DeepSpeed 0.19.8's `_do_optimizer_sanity_check` raises NotImplementedError for that mix when
    the worker builds the engine: 0.1.4 answers a bare 500 at /initialize (strict: 400 naming it)."""

    async def test(client, server):
        status, body = await _init(
            client, "training", checkpoint_path=str(tmp_path), ds_config=ZERO0_BF16_FP32
        )
        assert (status, body) == (500, "Internal Server Error")
        ok = {**ZERO0_BF16_FP32, "zero_optimization": {"stage": 2}}
        assert (await _init(client, "training", checkpoint_path=str(tmp_path), ds_config=ok))[0] == 200

    _serve(test)

    async def strict(client, server):
        status, body = await _init(
            client, "training", checkpoint_path=str(tmp_path), ds_config=ZERO0_BF16_FP32
        )
        assert status == 400 and "grad_accum_dtype" in body["detail"]

    _serve(strict, STRICT)


def test_generate_returns_the_first_output_for_n_and_no_weights_version():
    async def test(client, server):
        await _init(client, "sampling")
        params = {"n": 3, "max_tokens": 3, "temperature": 0.0}
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["a", "b"], "sampling_params": params, "extra": 1}
        )
        assert status == 200 and len(body["results"]) == 2
        assert all("weights_version" not in r for r in body["results"])
        # a key vLLM's SamplingParams does not take fails inside 0.1.4's pool
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["a"], "sampling_params": {"not_a_vllm_key": 1}}
        )
        assert (status, body) == (500, "Internal Server Error")

    _serve(test)

    async def strict(client, server):
        await _init(client, "sampling")
        status, body = await _wire_post(
            client, "/generate", 1, {"prompts": ["a"], "sampling_params": {"n": 3, "max_tokens": 3}}
        )
        assert status == 400 and "replicate prompts" in body["detail"]
        status, body = await _wire_post(client, "/generate", 1, {"prompts": ["a"], "extra": 1})
        assert status == 422

    _serve(strict, STRICT)


def test_worker_failures_are_a_bare_500(tmp_path):
    """0.1.4 has no exception handler: a failing worker call is `500 Internal Server Error`, and
    `/forward` reads the job table before checking the job (an unknown job is a 500 there too)."""

    async def test(client, server):
        await _init(client, "training", checkpoint_path=str(tmp_path))
        status, body = await _post(client, "/load-checkpoint", 1, {"path": str(tmp_path / "missing")})
        assert (status, body) == (500, "Internal Server Error")
        assert (await _wire_post(client, "/forward", 9, {"batch": {}, "meta": {}, "processing": {}}))[
            0
        ] == 500
        status, body = await _post(client, "/step", 9)
        assert status == 404 and "Job 9 not found" in body["detail"]  # _verify_job: as 0.1.4

    _serve(test)

    async def strict(client, server):
        await _init(client, "training", checkpoint_path=str(tmp_path))
        status, _ = await _post(client, "/load-checkpoint", 1, {"path": str(tmp_path / "missing")})
        assert status == 404

    _serve(strict, STRICT)


def test_the_0_1_4_profile_uses_its_hard_coded_clip_ratios():
    assert ReferenceServer().settings.honour_clip_ratios is False
    assert ReferenceServer(fidelity=STRICT).settings.honour_clip_ratios is True


def _trainer_sampler_norms(engine: ReferenceBackend) -> tuple[float, float]:
    def norm(params):
        return float(torch.sqrt(sum((p.double() ** 2).sum() for p in params.values())))

    return norm(engine.trainer_parameters()), norm(engine.sampler_parameters())


def test_the_state_guard_refuses_a_sync_into_the_sleeping_sampler_and_without_it_the_sync_is_lost(tmp_path):
    async def flow(client, server, guard: bool):
        await _init(client, "sampling")
        await _init(client, "training", checkpoint_path=str(tmp_path / str(guard)))
        status, body = await _wire_post(client, "/forward-backward", 2, _train_body(server.engine, 1.0))
        assert status == 200, body
        assert (await _post(client, "/step", 2))[0] == 200
        assert (await _post(client, "/sleep-inference", 1, {"level": 1}))[0] == 200
        sync = {"source_sub_job_id": 2, "target_sub_job_ids": [1]}
        status, body = await _post(
            client, "/operation", 2, {"operation_type": "weight-sync", "payload": sync}
        )
        if guard:
            assert status == 409 and "sleeping sampler" in body["detail"]
            status, body = await _wire_post(client, "/generate", 1, {"prompts": ["a"]})
            assert status == 409 and "wake_inference" in body["detail"]
            return
        assert status == 200  # 0.1.4: no check, reported as a success
        trainer, sampler = _trainer_sampler_norms(server.engine)
        assert trainer != sampler  # ... but the sampler still holds the old weights
        status, body = await _wire_post(client, "/generate", 1, {"prompts": ["a"]})
        assert status == 200  # generating while asleep is not refused either

    _serve(lambda c, s: flow(c, s, True))
    _serve(lambda c, s: flow(c, s, False), Fidelity(state_guard=False))


def test_a_zero_norm_step_still_moves_the_weights_and_the_schedule(engine_factory, ref):
    """DeepSpeed 0.19.8 steps over an all-zero gradient on every ZeRO stage (BF16_Optimizer no longer
    asserts a non-zero norm): AdamW's momentum from the previous step moves the weights and the
    schedule advances. The in-process engine's default ('skip') is what the 0.1.4 worker intends."""
    fidelity_settings = Fidelity().engine_settings(ReferenceEngineSettings(num_threads=1))
    for zero_norm_step in ("apply", "skip"):
        settings = fidelity_settings.model_copy(update={"zero_norm_step": zero_norm_step})
        engine = engine_factory(**settings.model_dump())
        ref.run(engine.train(_train_body(engine, 1.0)))
        ref.run(engine.step())
        before = engine.trainer_parameters()
        ref.run(engine.train(_train_body(engine, 0.0)))  # zero advantages, no entropy/KL: zero gradient
        out = ref.run(engine.step())
        after = engine.trainer_parameters()
        moved = any(not torch.equal(before[k], after[k]) for k in before)
        assert out.grad_norm == 0.0
        if zero_norm_step == "apply":
            assert moved and out.step == 2
        else:
            assert not moved and out.step == 1 and out.metrics["skipped"] == 1.0

"""The overlapped GRPO pipeline on the real reference engine: k=0 is the synchronous path bit for bit,
slow training never trains a rollout older than k, stale groups are dropped or regenerated (counted),
and the engine's sampler and trainer really run at the same time."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from typing import Any

import pytest
import torch
from arctic_rl_core.advantages import grpo_outcome_advantages
from arctic_rl_core.async_grpo.token_task import TokenTask, even_token_reward
from arctic_rl_core.backends.protocol import GenerateOutput, SamplingParams
from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    payload_digest,
    response_logprobs,
)
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

PROMPT_LEN = 6
STEPS = 4


def _config(**async_settings: Any) -> ArcticRLConfig:
    data: dict[str, Any] = {
        "backend": {
            "kind": "reference",
            "reference": {
                "num_layers": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
            },
        },
        "batch": {
            "prompts_per_step": 2,
            "rollouts_per_prompt": 3,
            "max_prompt_length": 8,
            "max_response_length": 6,
        },
        "optimizer": {"lr": 1e-2},
    }
    if async_settings:
        data["async"] = async_settings
    return ArcticRLConfig.from_dict(data)


class Recording:
    """The backend, with every train payload's digest recorded and optional injected delays/faults."""

    def __init__(self, engine: ReferenceBackend, *, train_delay_s: float = 0.0) -> None:
        self.engine = engine
        self.train_delay_s = train_delay_s
        self.digests: list[str] = []
        self.train_keys: list[set[str]] = []
        self.generate_calls = 0
        self.stale_once: dict[tuple[int, ...], int] = {}  # first prompt -> versions to subtract, once

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def forward_backward(self, payload):
        self.digests.append(payload_digest(payload))
        batches = payload.batch if isinstance(payload.batch, list) else [payload.batch]
        self.train_keys.append(set(batches[0]))
        if self.train_delay_s:
            await asyncio.sleep(self.train_delay_s)  # slow training, injected
        return await self.engine.forward_backward(payload)

    async def generate(self, prompts, params) -> GenerateOutput:
        out = await self.engine.generate(prompts, params)
        self.generate_calls += 1
        lag = self.stale_once.pop(tuple(prompts[0]), 0)
        return dataclasses.replace(out, weights_version=out.weights_version - lag) if lag else out


def _engine(cfg: ArcticRLConfig) -> ReferenceBackend:
    return ReferenceBackend(ReferenceEngineSettings.from_config(cfg))


def _task(cfg: ArcticRLConfig, backend: Any, engine: ReferenceBackend) -> TokenTask:
    return TokenTask.create(
        cfg, backend, pad_token_id=engine.pad_token_id, vocab_size=engine.vocab_size, prompt_len=PROMPT_LEN
    )


async def _synchronous_loop(
    cfg: ArcticRLConfig, backend: Recording, engine: ReferenceBackend, steps: int
) -> list[float]:
    """Today's synchronous GRPO path, written out with the core's pieces: generate, score, advantages,
    old log-probs, forward-backward, step, sync; one after another."""
    task = _task(cfg, backend, engine)  # only for its prompts: the same seeded prompts per step
    spec = PayloadSpec.from_config(cfg, pad_token_id=engine.pad_token_id)
    policy = WeightSyncPolicy.from_config(cfg)
    n = cfg.batch.rollouts_per_prompt
    losses = []
    for step in range(steps):
        prompts = task.prompts_for_step(step)
        params = SamplingParams(max_tokens=cfg.batch.max_response_length, temperature=cfg.loss.temperature)
        out = await backend.generate([list(p) for p in prompts for _ in range(n)], params)
        assert out.weights_version == step
        scores = torch.tensor([even_token_reward(c.token_ids) for c in out.completions])
        advantages = grpo_outcome_advantages(scores, [i // n for i in range(len(out.completions))])
        samples = [
            RolloutSample(
                prompt_ids=list(prompts[i // n]), response_ids=list(c.token_ids), advantages=float(a)
            )
            for i, (c, a) in enumerate(zip(out.completions, advantages.tolist(), strict=True))
        ]
        fwd = build_forward_payload(samples, spec)
        old_B_R, _ = response_logprobs((await backend.forward(fwd)).logprobs_B_S, fwd, spec)
        samples = [
            dataclasses.replace(s, old_logprobs=old_B_R[b, : len(s.response_ids)].tolist())
            for b, s in enumerate(samples)
        ]
        losses.append((await backend.forward_backward(build_train_payload(samples, spec))).loss)
        await backend.step()
        await sync_after_step(backend, policy)
    return losses


def test_k0_is_bit_identical_to_the_synchronous_path() -> None:
    cfg = _config()
    sync_engine, pipe_engine = _engine(cfg), _engine(cfg)
    sync_backend, pipe_backend = Recording(sync_engine), Recording(pipe_engine)
    try:
        losses = asyncio.run(_synchronous_loop(cfg, sync_backend, sync_engine, STEPS))
        records = asyncio.run(_task(cfg, pipe_backend, pipe_engine).run(STEPS))
        assert sync_backend.digests == pipe_backend.digests  # every train payload, byte for byte
        assert [r.metrics["loss"] for r in records] == losses
        for name, value in sync_engine.trainer_parameters().items():
            assert torch.equal(value, pipe_engine.trainer_parameters()[name]), name
        assert all(r.group_versions == (r.step,) * 2 for r in records)  # on-policy: version == step
        assert all(
            r.metrics["async/staleness_max"] == 0 and r.metrics["async/is_weight_mean"] == 1.0
            for r in records
        )
        assert not any("rollout_is_weights" in keys for keys in pipe_backend.train_keys)
    finally:
        asyncio.run(sync_engine.shutdown())
        asyncio.run(pipe_engine.shutdown())


@pytest.mark.parametrize("k", [1, 2])
def test_slow_training_never_trains_a_rollout_older_than_k(k: int) -> None:
    cfg = _config(max_staleness=k)
    engine = _engine(cfg)
    backend = Recording(engine, train_delay_s=0.25)  # training far slower than generation
    try:
        records = asyncio.run(_task(cfg, backend, engine).run(STEPS + 1))
    finally:
        asyncio.run(engine.shutdown())
    lags = [r.trainer_version - v for r in records for v in r.group_versions]
    assert all(0 <= lag <= k for lag in lags), lags  # every trained rollout within k
    assert max(lags) == k  # generation really ran ahead by k: the bound is reached, never passed
    assert [r.metrics["async/staleness_max"] for r in records][k:] == [float(k)] * (STEPS + 1 - k)
    # generation of a later batch ran while an earlier one trained
    assert any(
        later.generation_interval[0] < earlier.training_interval[1]
        for earlier, later in itertools.pairwise(records)
    )
    assert all(r.metrics["async/dropped_groups"] == 0 for r in records)
    stale_steps = [r for r in records if r.trainer_version - min(r.group_versions) > 0]
    assert any(r.metrics["async/is_weight_mean"] != 1.0 for r in stale_steps)  # IS weights off-policy
    assert all("rollout_is_weights" in keys for keys in backend.train_keys)  # sent with every step


@pytest.mark.parametrize("policy", ["drop", "regenerate"])
def test_stale_groups_are_dropped_or_regenerated_and_counted(policy: str) -> None:
    cfg = _config(max_staleness=1, stale_policy=policy)
    engine = _engine(cfg)
    backend = Recording(engine)
    task = _task(cfg, backend, engine)
    # batches 2 and 3 come back two versions older the first time (as if in flight across two syncs)
    backend.stale_once = {task.prompts_for_step(step)[0]: 2 for step in (2, 3)}
    try:
        records = asyncio.run(asyncio.wait_for(task.run(STEPS + 1), timeout=120))
    finally:
        asyncio.run(engine.shutdown())
    by_step = {r.step: r for r in records}
    lags = [r.trainer_version - v for r in records for v in r.group_versions]
    assert all(0 <= lag <= 1 for lag in lags), lags
    for stale in (by_step[2], by_step[3]):  # two whole batches in a row, and the run still finished
        if policy == "drop":
            assert stale.metrics["async/dropped_groups"] == 2 and not stale.trained
            assert stale.group_versions == () and stale.metrics["async/regenerated_groups"] == 0
        else:
            assert stale.metrics["async/regenerated_groups"] == 2 and stale.trained
            assert stale.group_versions == (stale.trainer_version,) * 2  # sampled anew
    handled = sum(r.metrics["async/dropped_groups"] + r.metrics["async/regenerated_groups"] for r in records)
    assert handled == 4
    assert by_step[4].trained and by_step[4].trainer_version == (2 if policy == "drop" else 4)


@pytest.mark.parametrize("sampler_process", [False, True], ids=["thread", "process"])
def test_engine_sampler_and_trainer_overlap_and_sync_waits_for_generation(sampler_process: bool) -> None:
    cfg = _config()
    settings = ReferenceEngineSettings.from_config(cfg)
    engine = ReferenceBackend(settings.model_copy(update={"sampler_process": sampler_process}))
    spans: dict[str, list[tuple[float, float, int]]] = {"sample": [], "train": []}
    original_sample, original_train = engine._sample, engine._train

    def timed(name, fn):
        def run(*args):
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spans[name].append((start, time.perf_counter(), threading.get_ident()))

        return run

    engine._sample, engine._train = timed("sample", original_sample), timed("train", original_train)
    spec = PayloadSpec.from_config(cfg, pad_token_id=engine.pad_token_id)
    samples = [
        RolloutSample(
            prompt_ids=[5, 6, 7], response_ids=[8, 9, 10, 11], advantages=1.0, old_logprobs=[-5.0] * 4
        )
    ] * 6
    payload = build_train_payload(samples, spec)
    long_generation = SamplingParams(max_tokens=6, temperature=1.0)

    async def overlapped():
        async def train_many():
            for _ in range(30):
                await engine.forward_backward(payload)

        await asyncio.gather(engine.generate([[5, 6, 7]] * 64, long_generation), train_many())

    async def sync_during_generation():
        await engine.step()
        generation = asyncio.ensure_future(engine.generate([[5, 6, 7]] * 64, long_generation))
        while not engine._sampler_lock.locked():  # the generate call is in flight
            await asyncio.sleep(0.001)
        version = await engine.sync_weights()
        out = await generation
        return out.weights_version, version

    try:
        asyncio.run(overlapped())
        ((s_start, s_end, s_thread),) = spans["sample"]
        assert s_thread != spans["train"][0][2]  # two threads
        assert any(start < s_end and end > s_start for start, end, _ in spans["train"])  # at the same time
        rollout_version, synced = asyncio.run(sync_during_generation())
        assert (rollout_version, synced) == (0, 1)  # the sync waited for the generation in flight
    finally:
        asyncio.run(engine.shutdown())


def test_a_failing_generation_stops_the_run_with_its_error() -> None:
    from arctic_rl_core.async_grpo.pipeline import AsyncRolloutPipeline
    from arctic_rl_core.async_grpo.staleness import StalenessGate

    trained: list[int] = []

    async def generate(prompts):
        if prompts == ["boom"]:
            raise RuntimeError("sampler died")
        return []

    async def train(version, groups):  # pragma: no cover - never reached with no groups
        trained.append(version)

    pipeline = AsyncRolloutPipeline(
        gate=StalenessGate(1),
        prompts_for_step=lambda step: ["ok"] if step == 0 else ["boom"],
        generate=generate,
        train=train,
    )
    with pytest.raises(RuntimeError, match="sampler died"):
        asyncio.run(pipeline.run(3))
    assert [r.trained for r in pipeline.records] == [False]  # batch 0 had no groups: nothing trained

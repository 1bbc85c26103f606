"""Fixtures of the reference-backend tests: tiny engines and payloads built with the core wire builder."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
from arctic_rl_core.wire import PayloadSpec, RolloutSample
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

P, R = 6, 5  # prompt and response widths of the test payloads


def _samples(n: int, *, seed: int = 0, vocab: int = 1000, with_old: bool = True) -> list[RolloutSample]:
    """`n` rollouts with prompts of 1..P tokens and responses of 1..R tokens (ids avoid the special tokens)."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(n):
        plen = 1 + int(torch.randint(0, P, (1,), generator=g))
        rlen = 1 + int(torch.randint(0, R, (1,), generator=g))
        prompt = torch.randint(10, vocab, (plen,), generator=g).tolist()
        response = torch.randint(10, vocab, (rlen,), generator=g).tolist()
        advantages = torch.randn(rlen, generator=g).tolist()
        old = (-torch.rand(rlen, generator=g) * 4 - 4).tolist() if with_old else None
        samples.append(
            RolloutSample(prompt_ids=prompt, response_ids=response, advantages=advantages, old_logprobs=old)
        )
    return samples


def _spec(engine: ReferenceBackend, **overrides) -> PayloadSpec:
    fields = dict(
        pad_token_id=engine.pad_token_id,
        max_prompt_len=P,
        max_response_len=R,
        rollout_n=1,
        temperature=1.0,
        dp_size=engine.settings.dp_size,
        grad_accum_steps=engine.settings.grad_accum_steps,
    )
    fields.update(overrides)
    return PayloadSpec(**fields)


@pytest.fixture
def ref() -> SimpleNamespace:
    """`ref.run(coro)`, `ref.samples(n, seed=...)`, `ref.spec(engine, **overrides)`, `ref.P`, `ref.R`."""
    return SimpleNamespace(run=asyncio.run, samples=_samples, spec=_spec, P=P, R=R)


@pytest.fixture
def engine_factory() -> Callable[..., ReferenceBackend]:
    created: list[ReferenceBackend] = []

    def factory(**settings) -> ReferenceBackend:
        engine = ReferenceBackend(ReferenceEngineSettings(**settings))
        created.append(engine)
        return engine

    yield factory
    for engine in created:
        asyncio.run(engine.shutdown())

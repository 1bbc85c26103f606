"""GRPO steps with a server-side loss named by dotted path, through the wire: `ArcticBackend` (the real
arctic-platform 0.1.4 client) over HTTP to `arctic-rl serve --reference` in its own process. Shared
by the SkyRL and verl suites, which build the core config through their adapter's translation."""

from __future__ import annotations

import math
from typing import Any

from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.config.reference_model import ReferenceModelConfig
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_losses import SERVER_LOSS_FN
from arctic_rl_testbed.reference.model import load_tokenizer

PROMPTS = ("Count to three:", "Name a colour:")


def wire_grpo_steps(cfg: Any, steps: int = 2) -> dict[str, Any]:
    """Run `steps` GRPO steps (generate, old log-probs, forward-backward with rollout weights, step,
    sync) on `cfg` (backend.kind=http); returns what the checks need."""
    tokenizer = load_tokenizer(ReferenceModelConfig())  # the tokenizer the reference server serves
    spec = PayloadSpec.from_config(cfg, pad_token_id=int(tokenizer.pad_token_id))
    n = cfg.batch.rollouts_per_prompt
    prompts = [p for p in PROMPTS[: cfg.batch.prompts_per_step] for _ in range(n)]
    backend = ArcticBackend.from_config(cfg)  # with loss_fn=arctic_rl_core: the import probe runs here
    trained, stepped, payloads = [], [], []
    try:
        for step in range(steps):
            params = SamplingParams(
                max_tokens=cfg.batch.max_response_length, temperature=cfg.loss.temperature
            )
            out = dispatch.run(backend.generate(prompts, params))
            samples = [
                RolloutSample(
                    prompt_ids=tokenizer.encode(prompt, add_special_tokens=True),
                    response_ids=list(c.token_ids),
                    advantages=[1.0, -1.0][(i + step) % 2] * (1 + 0.1 * i),
                    rollout_is_weights=[0.5 + 0.1 * (j % 5) for j in range(len(c.token_ids))],
                )
                for i, (prompt, c) in enumerate(zip(prompts, out.completions, strict=True))
            ]
            forward = build_forward_payload(samples, spec)
            old, _ = response_logprobs(dispatch.run(backend.forward(forward)).logprobs_B_S, forward, spec)
            payload = build_train_payload(with_response_logprobs(samples, old, field="old_logprobs"), spec)
            payloads.append(payload)
            trained.append(dispatch.run(backend.forward_backward(payload)))
            stepped.append(dispatch.run(backend.step()))
            dispatch.run(sync_after_step(backend, WeightSyncPolicy.from_config(cfg)))
    finally:
        dispatch.run(backend.shutdown())
    return {"trained": trained, "stepped": stepped, "payloads": payloads}


def check_wire_run(run: dict[str, Any], family: str) -> None:
    """The server ran the family by dotted path, with the rollout weights, and training moved."""
    for payload in run["payloads"]:
        assert payload.processing["loss_fn"] == SERVER_LOSS_FN
        assert payload.meta["policy_loss_config"]["loss_mode"] == family
        assert "rollout_is_weights" in payload.batch
    for out in run["trained"]:
        assert math.isfinite(out.loss)
        assert "actor/pg_loss" in out.metrics and "actor/ppo_kl" in out.metrics
        # only the dual-clip family reports the dual-clip bound: the built-in verl_grpo always would
        assert ("actor/pg_clipfrac_lower" in out.metrics) == (family == "dual_clip")
    assert all(s.grad_norm > 0 for s in run["stepped"])
    assert [s.step for s in run["stepped"]] == list(range(1, len(run["stepped"]) + 1))

"""A framework-free GRPO run on a synthetic token task, over any `Backend`, through the overlapped
pipeline: what `arctic-rl bench async` measures and the staleness tests drive.

The task: prompts are random token ids (seeded per step); a response's reward is the fraction of its
tokens with an even id, so every group has a reward spread. One step: score, GRPO outcome advantages
(`arctic_rl_core.advantages`), old log-probs from a forward pass, with k > 0 the truncated IS weights
of the rollout log-probs against them (`rollout_is_weights`), forward-backward, optimizer step, and
the weight sync (`weight_sync.sync_after_step`). With k = 0 nothing of the asynchronous path is sent:
the payloads are the synchronous ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arctic_rl_core.async_grpo.is_weights import truncated_is_weights, weights_per_sample
from arctic_rl_core.async_grpo.pipeline import AsyncRolloutPipeline, RolloutGroup, StepRecord, TrainResult
from arctic_rl_core.async_grpo.staleness import StalenessGate

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.config import ArcticRLConfig
import dataclasses

from arctic_rl_core.advantages import grpo_outcome_advantages
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
)

Prompt = tuple[int, ...]


def even_token_reward(token_ids: Sequence[int]) -> float:
    """The task's reward: the fraction of response tokens whose id is even (0 for an empty response)."""
    return sum(1 for t in token_ids if t % 2 == 0) / len(token_ids) if token_ids else 0.0


@dataclass
class TokenTask:
    """One run's pieces, built from an `ArcticRLConfig` (batch shape, loss, `async` group) and a backend."""

    cfg: ArcticRLConfig
    backend: Backend
    spec: PayloadSpec
    policy: WeightSyncPolicy
    vocab_size: int
    prompt_len: int
    seed: int = 0

    @classmethod
    def create(
        cls, cfg: ArcticRLConfig, backend: Backend, *, pad_token_id: int, vocab_size: int, prompt_len: int
    ) -> TokenTask:
        if prompt_len > cfg.batch.max_prompt_length:
            raise ValueError(
                f"prompt_len={prompt_len} exceeds batch.max_prompt_length={cfg.batch.max_prompt_length}"
            )
        return cls(
            cfg=cfg,
            backend=backend,
            spec=PayloadSpec.from_config(cfg, pad_token_id=pad_token_id),
            policy=WeightSyncPolicy.from_config(cfg),
            vocab_size=vocab_size,
            prompt_len=prompt_len,
            seed=cfg.determinism.seed,
        )

    @property
    def max_staleness(self) -> int:
        return self.cfg.async_settings.max_staleness

    def prompts_for_step(self, step: int) -> list[Prompt]:
        import torch

        g = torch.Generator().manual_seed(self.seed * 100_003 + step)
        ids = torch.randint(
            3, self.vocab_size, (self.cfg.batch.prompts_per_step, self.prompt_len), generator=g
        )
        return [tuple(row) for row in ids.tolist()]

    async def generate(self, prompts: Sequence[Prompt]) -> list[RolloutGroup[Prompt]]:
        """One generate call for all groups (each prompt repeated rollouts_per_prompt times)."""

        n = self.cfg.batch.rollouts_per_prompt
        params = SamplingParams(
            max_tokens=self.cfg.batch.max_response_length,
            temperature=self.cfg.loss.temperature,
            logprobs=self.max_staleness > 0,  # the behaviour policy's log-probs, for the IS weights
        )
        out = await self.backend.generate([list(p) for p in prompts for _ in range(n)], params)
        return [
            RolloutGroup(
                prompt=p,
                completions=tuple(out.completions[i * n : (i + 1) * n]),
                weights_version=out.weights_version,
            )
            for i, p in enumerate(prompts)
        ]

    def _samples(self, groups: Sequence[RolloutGroup[Prompt]]) -> list[RolloutSample]:
        import torch

        completions = [(gi, c) for gi, g in enumerate(groups) for c in g.completions]
        scores = torch.tensor([even_token_reward(c.token_ids) for _, c in completions], dtype=torch.float32)
        advantages = grpo_outcome_advantages(scores, [gi for gi, _ in completions])
        return [
            RolloutSample(
                prompt_ids=list(groups[gi].prompt),
                response_ids=list(c.token_ids),
                advantages=float(a),
                rollout_logprobs=list(c.logprobs) if c.logprobs is not None else None,
            )
            for (gi, c), a in zip(completions, advantages.tolist(), strict=True)
        ]

    async def train(self, trainer_version: int, groups: list[RolloutGroup[Prompt]]) -> TrainResult:
        import torch

        samples = self._samples(groups)
        forward_payload = build_forward_payload(samples, self.spec)
        forward = await self.backend.forward(forward_payload)
        old_B_R, mask_B_R = response_logprobs(forward.logprobs_B_S, forward_payload, self.spec)
        lengths = [len(s.response_ids) for s in samples]
        old = [old_B_R[b, :n].tolist() for b, n in enumerate(lengths)]
        is_stats = None
        if self.max_staleness > 0:
            rollout_B_R = torch.zeros_like(old_B_R)
            for b, s in enumerate(samples):
                rollout_B_R[b, : lengths[b]] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
            weights_B_R, is_stats = truncated_is_weights(
                old_B_R, rollout_B_R, mask_B_R, self.cfg.async_settings.is_weight_cap
            )
            is_weights = weights_per_sample(weights_B_R, lengths)
            samples = [
                dataclasses.replace(s, old_logprobs=o, rollout_is_weights=w, rollout_logprobs=None)
                for s, o, w in zip(samples, old, is_weights, strict=True)
            ]
        else:
            samples = [dataclasses.replace(s, old_logprobs=o) for s, o in zip(samples, old, strict=True)]
        train = await self.backend.forward_backward(build_train_payload(samples, self.spec))
        step = await self.backend.step()
        version = await sync_after_step(self.backend, self.policy)
        metrics = {
            "loss": float(train.loss),
            "grad_norm": float(step.grad_norm),
            "reward_mean": sum(even_token_reward(s.response_ids) for s in samples) / len(samples),
            "trained_samples": float(len(samples)),
        }
        return TrainResult(metrics=metrics, weights_version=version, is_stats=is_stats)

    def pipeline(self) -> AsyncRolloutPipeline[Prompt]:
        return AsyncRolloutPipeline(
            gate=StalenessGate.from_config(self.cfg),
            prompts_for_step=self.prompts_for_step,
            generate=self.generate,
            train=self.train,
        )

    async def run(self, steps: int) -> list[StepRecord]:
        return await self.pipeline().run(steps)

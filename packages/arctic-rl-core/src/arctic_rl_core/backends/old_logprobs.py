"""Where the old-log-prob pass gets its values when the backend has no forward (Cortex).

Cortex's transport has no `forward` / `log-probs` op (arctic-platform 0.1.4), so the behaviour
policy's log-probs are the ones the sampler drew the tokens with: every generation asks for the
sampled token's log-prob, and the adapters' old-log-prob pass (SkyRL's `forward("policy")`, verl's
`compute_log_prob`) returns them instead of calling the server. With one optimizer step per rollout
batch (the dry run requires it on Cortex) these are the policy's own log-probs at sampling time, up
to the sampler-vs-trainer numerical difference that off-policy correction exists for.

The entropy the old-log-prob pass reports (verl's `actor/entropy`) is then the sampled-token
estimate `-log p(sampled token)`, whose expectation is the entropy; Cortex's own `grpo` loss
reports the same estimate.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from arctic_rl_core.backends.protocol import Backend, SamplingParams


def from_sampler(backend: Backend) -> bool:
    """True when the old-log-prob pass must serve the sampler's log-probs (no server forward)."""
    return not backend.serves_forward


def sampling_params_for(backend: Backend, params: SamplingParams) -> SamplingParams:
    """`params`, asking for the sampled tokens' log-probs when the old-log-prob pass needs them."""
    if from_sampler(backend) and not params.logprobs:
        return dataclasses.replace(params, logprobs=True)
    return params


def sampler_logprobs(rollout_B_R: torch.Tensor | None, mask_B_R: torch.Tensor, *, where: str) -> torch.Tensor:
    """The sampler's log-probs as the old log-probs (float32, 0 outside `mask_B_R`); a clear error
    when the batch has none. `where`: the batch field, for the message."""
    import torch

    if rollout_B_R is None:
        raise RuntimeError(
            f"the batch has no {where}: on a backend without forward (Cortex) the old log-probs are the "
            "sampler's, and every generation asks for them; a batch built elsewhere must carry them"
        )
    if rollout_B_R.shape != mask_B_R.shape:
        raise RuntimeError(
            f"{where} has shape {tuple(rollout_B_R.shape)}, the response mask {tuple(mask_B_R.shape)}"
        )
    values = rollout_B_R.detach().to("cpu", torch.float32)
    mask = mask_B_R.detach().to("cpu").bool()
    if not torch.isfinite(values[mask]).all():
        raise RuntimeError(f"{where} holds NaN or infinite values on response tokens")
    return torch.where(mask, values, torch.zeros_like(values))


def sampled_token_entropy(logprobs_B_R: torch.Tensor) -> torch.Tensor:
    """`-log p(sampled token)`: the single-sample entropy estimate (0 where log-probs are 0)."""
    return -logprobs_B_R

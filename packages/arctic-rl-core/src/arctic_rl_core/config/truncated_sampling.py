"""Top-k / top-p on the training rollouts against the trainer's log-probs: both adapters' rule.

With `processed_logprobs` (the default where the training forward applies the temperature: ray, http,
reference) vLLM reports each sampled token's log-prob under the distribution it sampled from: the
temperature-scaled logits with top-k, then top-p, masked to -inf and renormalised over the kept tokens.
The trainer's forward (arctic-platform 0.1.4's training job, the reference engine) computes the
temperature-scaled log-softmax over the whole vocabulary. With truncation the two differ by the log of
the kept tokens' probability mass at every position (rollout log-prob >= trainer log-prob), so every
importance weight built from the rollout log-probs (async.is_weight_cap's truncated IS weights,
SkyRL's TIS and rollout_is, verl's rollout_correction, Cortex's old log-probs served from the sampler)
is below 1 by that mass even at staleness 0: a bias no vLLM logprobs_mode removes (raw is unscaled,
the processed ones are truncated), and the trainer's forward cannot be told the masks. So the
combination is refused at dry run, naming both fixes: no truncation on the training rollouts
(evaluation sampling may keep it), or sampling at temperature 1 with `raw_logprobs`, which is then
exactly the trainer's full-vocabulary distribution whatever top-k/top-p keep.

A run that builds no weight from the rollout log-probs (synchronous, the old log-probs from the
trainer's own forward, no rollout correction) never reads them: its truncation is what the user chose
to sample with, and is accepted. The adapter says whether the framework's settings read them
(`reads_rollout_logprobs`); an asynchronous run (async.max_staleness > 0) and Cortex (old log-probs
served by the sampler) always do.
"""

from __future__ import annotations

from arctic_rl_core.config.engine_args import logprobs_mode
from arctic_rl_core.config.errors import ConfigIssue
from arctic_rl_core.config.run_config import ArcticRLConfig


def truncates(top_p: float | None, top_k: int | None) -> bool:
    """vLLM's sampling parameters keep fewer than all tokens (top_k -1 and 0 both mean off)."""
    return (top_p is not None and float(top_p) < 1.0) or (top_k is not None and int(top_k) > 0)


def truncated_sampling_issues(
    cfg: ArcticRLConfig,
    *,
    top_p: float | None,
    top_k: int | None,
    top_p_field: str,
    top_k_field: str,
    logprobs_mode_field: str,
    reads_rollout_logprobs: bool = True,
) -> list[ConfigIssue]:
    """The issue when the training rollouts' top-k/top-p make the reported log-probs disagree with the
    trainer's and the run builds importance weights from them (`*_field`: the framework's names of
    the settings, for the message; `reads_rollout_logprobs`: whether the framework's settings do)."""
    if not truncates(top_p, top_k) or logprobs_mode(cfg) != "processed_logprobs":
        return []
    if not (reads_rollout_logprobs or cfg.async_settings.max_staleness > 0 or cfg.backend.kind == "cortex"):
        return []
    given = [
        f"{field}={value}"
        for field, value, on in (
            (top_p_field, top_p, top_p is not None and float(top_p) < 1.0),
            (top_k_field, top_k, top_k is not None and int(top_k) > 0),
        )
        if on
    ]
    path = top_p_field if top_p is not None and float(top_p) < 1.0 else top_k_field
    value = top_p if path == top_p_field else top_k
    return [
        ConfigIssue(
            path,
            value,
            f"with {' and '.join(given)} the sampler's processed_logprobs ({logprobs_mode_field}) are "
            "renormalised over the kept tokens, while the trainer's log-probs are over the whole vocabulary, "
            "so every importance weight built from the rollout log-probs is biased below 1 (by the kept "
            "tokens' probability mass) even at staleness 0",
            f"set {top_p_field}=1.0 and {top_k_field}=-1 for the training rollouts (evaluation sampling may "
            f"keep them), or sample at temperature 1 with {logprobs_mode_field}=raw_logprobs (the model's "
            "full distribution, which the trainer computes at temperature 1)",
        )
    ]

"""SkyRL's `trainer.algorithm.loss_reduction` on the Arctic server.

SkyRL reduces the loss by scaling the advantages per mini-batch (`apply_loss_reduction_to_advantages_
minibatch`) and summing the token losses. Three of its modes are the server's own aggregations, so the
adapter skips SkyRL's scaling and the server aggregates. The two that depend on SkyRL's own grouping
of the rows keep SkyRL's scaling (computed by SkyRL's function, in SkyRL's row order) and the server
sums the policy term (`loss.pg_loss_agg_mode=token-sum`), which is exactly SkyRL's reduction:

- `token_mean_legacy`: each run of `trainer.micro_train_batch_size_per_gpu` rows of the mini-batch
  divided by its own token count, the runs averaged (SkyRL's former token_mean);
- `prompt_mean`: the token mean within each prompt's group, averaged over the prompts.

The KL and entropy terms are not pre-scaled in SkyRL either: they keep the `loss_agg_mode` below.
"""

from __future__ import annotations

# loss_reduction -> the server's aggregation of the whole loss
SERVER_AGGREGATED = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
# loss_reduction -> (loss_agg_mode for KL / entropy, pg_loss_agg_mode): SkyRL's pre-scaled advantages, summed
SKYRL_PRESCALED = {
    "token_mean_legacy": ("token-mean", "token-sum"),
    "prompt_mean": ("token-mean", "token-sum"),
}
LOSS_REDUCTIONS = (*SERVER_AGGREGATED, *SKYRL_PRESCALED)


def keeps_skyrl_scaling(loss_reduction: str) -> bool:
    """Whether the advantages reach the server scaled by SkyRL's own loss reduction."""
    return loss_reduction in SKYRL_PRESCALED

"""Math parity: the reference backend's `verl_grpo` loss against SkyRL 0.4.0's own dual-clip PPO loss
(`ppo_utils.ppo_policy_loss`, `policy_loss_type=dual_clip`, the only type the SkyRL adapter
accepts) and KL estimators (`compute_approx_kl`), on the seeded cases of
`arctic_rl_core.parity.loss_cases`.

Per token the math is the same and is compared bit for bit (rtol = 0). The reductions differ in
where the normaliser goes, so they are pinned with a float tolerance: SkyRL divides the ADVANTAGES
by the normaliser before the loss (`apply_loss_reduction_to_advantages_minibatch`) and then sums
the per-token losses, while verl / the Arctic server compute the per-token losses from raw
advantages and divide the sum. A positive scale does not change which clip branch is taken, so the
two agree up to float rounding. On the Arctic path the SkyRL adapter turns the pre-scaling off and
sends `loss_agg_mode` instead (token_mean -> token-mean, sequence_mean -> seq-mean-token-mean,
seq_mean_token_sum_norm -> seq-mean-token-sum-norm with loss_scale_factor = max_seq_len); the wire's
`global_batch_size` counts every row of the mini-batch, as SkyRL's batch_size does.

SkyRL computes the ratio `exp` in float32 whatever the input dtype (`safe_exp_delta`): the cases
are float32, where both sides are identical.
"""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.backends.reference.loss import aggregate, kl_penalty, policy_loss_vanilla
from arctic_rl_core.parity.loss_cases import random_policy_loss_case
from skyrl.backends.skyrl_train.utils.ppo_utils import (
    apply_loss_reduction_to_advantages_minibatch,
    compute_approx_kl,
    ppo_policy_loss,
)
from skyrl.train.config.config import AlgorithmConfig

CLIPS = [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, 1.5)]  # (eps_clip_low, eps_clip_high, clip_ratio_c)
# SkyRL loss_reduction -> core loss_agg_mode (the SkyRL adapter's mapping)
REDUCTIONS = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
MAX_SEQ_LEN = 16


def _algorithm(low: float, high: float, c: float, reduction: str = "token_mean") -> AlgorithmConfig:
    return AlgorithmConfig(
        policy_loss_type="dual_clip",
        eps_clip_low=low,
        eps_clip_high=high,
        clip_ratio_c=c,
        loss_reduction=reduction,
        max_seq_len=MAX_SEQ_LEN,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", CLIPS, ids=[f"clip{lo}-{hi}-c{c}" for lo, hi, c in CLIPS])
def test_per_token_dual_clip_loss_is_bit_identical(clip, seed):
    """SkyRL returns only a masked sum; a one-hot mask per token reads its per-token loss exactly."""
    case = random_policy_loss_case(seed)
    low, high, c = clip
    ours = policy_loss_vanilla(
        case.logprobs_B_R,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
    ).pg_losses
    config = _algorithm(low, high, c)
    theirs = torch.zeros_like(ours)
    for b, t in torch.nonzero(case.mask_B_R).tolist():
        one_hot = torch.zeros_like(case.mask_B_R)
        one_hot[b, t] = 1.0
        theirs[b, t], _ = ppo_policy_loss(
            case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R, config, loss_mask=one_hot
        )
    mask = case.mask_B_R.bool()
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=0, atol=0)
    # the pinned tokens of the case hit the dual clip and both ratio clamps
    assert ours[0, 0] == pytest.approx(1.0 * c) and ours[0, 1] == pytest.approx(0.5 * c)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fully_masked_row", [False, True])
@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_loss_reduction_matches_the_mapped_aggregation(reduction, fully_masked_row, seed):
    """SkyRL's pre-scaled advantages + sum == core aggregation with the wire's global counts
    (batch_num_tokens = masked tokens, global_batch_size = ALL rows, including a row whose mask is
    empty) up to float rounding; the gradients agree the same way."""
    case = random_policy_loss_case(seed, fully_masked_row=fully_masked_row)
    low, high, c = CLIPS[1]
    rows = case.mask_B_R.shape[0]

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    terms = policy_loss_vanilla(
        ours_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
    )
    ours = aggregate(
        terms.pg_losses,
        case.mask_B_R,
        REDUCTIONS[reduction],
        dp_size=1,
        batch_num_tokens=case.num_tokens,
        global_batch_size=rows,
        loss_scale_factor=MAX_SEQ_LEN,
    )
    ours.backward()

    scaled = apply_loss_reduction_to_advantages_minibatch(
        case.advantages_B_R, case.mask_B_R, reduction, micro_batch_size=rows, max_seq_len=MAX_SEQ_LEN
    )
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    theirs, _ = ppo_policy_loss(
        theirs_lp, case.old_logprobs_B_R, scaled, _algorithm(low, high, c, reduction), loss_mask=case.mask_B_R
    )
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=1e-5, atol=1e-8)
    assert ours.item() != 0.0


def test_local_fallback_row_count_is_where_skyrl_and_verl_differ():
    """Pinned: without a global row count, verl's `agg_loss` (and the core `aggregate`) divide the
    sequence modes by the rows that have a masked-in token; SkyRL divides by every row. The wire
    always sends `global_batch_size` = all rows, so on the Arctic path both agree (previous test)."""
    case = random_policy_loss_case(4, fully_masked_row=True)
    terms = policy_loss_vanilla(
        case.logprobs_B_R,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=3.0,
    )
    local = aggregate(terms.pg_losses, case.mask_B_R, "seq-mean-token-mean")
    scaled = apply_loss_reduction_to_advantages_minibatch(
        case.advantages_B_R, case.mask_B_R, "sequence_mean", micro_batch_size=6, max_seq_len=MAX_SEQ_LEN
    )
    theirs, _ = ppo_policy_loss(
        case.logprobs_B_R,
        case.old_logprobs_B_R,
        scaled,
        _algorithm(0.2, 0.2, 3.0, "sequence_mean"),
        loss_mask=case.mask_B_R,
    )
    rows, non_empty = case.mask_B_R.shape[0], case.num_sequences
    assert non_empty == rows - 1
    torch.testing.assert_close(local * non_empty / rows, theirs, rtol=1e-6, atol=1e-7)
    assert not torch.isclose(local, theirs, rtol=1e-3)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "abs"])
def test_kl_estimators_match_skyrl(kind):
    """SkyRL's `kl_estimator_type` names are the server's `kl_loss_type` names (k3 = low_var_kl)."""
    case = random_policy_loss_case(6)
    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    ours = kl_penalty(ours_lp, case.ref_logprobs_B_R, kind)
    theirs = compute_approx_kl(theirs_lp, case.ref_logprobs_B_R, kl_estimator_type=kind)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    (ours * case.mask_B_R).sum().backward()
    (theirs * case.mask_B_R).sum().backward()
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    # with SkyRL's mask argument, masked-out positions are exactly zero and the rest unchanged
    masked = compute_approx_kl(case.logprobs_B_R, case.ref_logprobs_B_R, case.mask_B_R, kind)
    torch.testing.assert_close(masked, ours.detach() * case.mask_B_R, rtol=0, atol=0)

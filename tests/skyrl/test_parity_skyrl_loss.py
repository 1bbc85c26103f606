"""Math parity: the reference backend's `verl_grpo` loss against SkyRL 0.4.0's own dual-clip PPO loss
(`ppo_utils.ppo_policy_loss`, `policy_loss_type=dual_clip`, the only type the SkyRL adapter
accepts) and KL estimators (`compute_approx_kl`), on the seeded cases of
`arctic_rl_testbed.parity.loss_cases`.

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
from arctic_rl_losses.aggregation import kl_penalty
from arctic_rl_testbed.parity.loss_cases import random_policy_loss_case
from arctic_rl_testbed.reference.loss import aggregate, policy_loss_vanilla
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


# -- arctic_rl_losses: every family SkyRL names, against SkyRL's own registered function -------

from arctic_rl_losses.aggregation import aggregate as core_aggregate  # noqa: E402
from arctic_rl_losses.families import FamilyParams, policy_terms  # noqa: E402
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry  # noqa: E402
from skyrl.train.config.config import (  # noqa: E402
    CISPOConfig,
    ClipCovConfig,
    KLCovConfig,
    OffPolicyCorrectionConfig,
    SAPOConfig,
)

# SkyRL policy_loss_type -> core family (the SkyRL adapter's SKYRL_POLICY_LOSSES, restated)
SKYRL_FAMILIES = {
    "regular": "ppo_clip",
    "dual_clip": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
}
OFF_POLICY_FAMILIES = ("regular", "dual_clip", "gspo", "sapo", "cispo")  # SkyRL applies TIS in these


def _family_config(loss_type: str, low: float, high: float, c: float, **kwargs) -> AlgorithmConfig:
    return AlgorithmConfig(
        policy_loss_type=loss_type,
        eps_clip_low=low,
        eps_clip_high=high,
        clip_ratio_c=c,
        loss_reduction="sequence_mean",  # SAPO / GSPO warn otherwise; the reduction is in the advantages
        max_seq_len=MAX_SEQ_LEN,
        sapo=SAPOConfig(tau_pos=1.5, tau_neg=2.0),
        cispo=CISPOConfig(cispo_eps_clip_low=low, cispo_eps_clip_high=high),
        clip_cov=ClipCovConfig(clip_ratio=0.3),
        kl_cov=KLCovConfig(kl_cov_frac=0.3, ppo_kl_coef=0.5),
        **kwargs,
    )


def _family_params(low: float, high: float, c: float) -> FamilyParams:
    """What the SkyRL adapter sends for `_family_config` (cispo's clip = its cispo_eps_clip_*)."""
    return FamilyParams(
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        tau_pos=1.5,
        tau_neg=2.0,
        clip_cov_ratio=0.3,
        kl_cov_ratio=0.3,
        ppo_kl_coef=0.5,
    )


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("clip", CLIPS, ids=[f"clip{lo}-{hi}-c{c}" for lo, hi, c in CLIPS])
@pytest.mark.parametrize("loss_type", sorted(SKYRL_FAMILIES))
def test_core_family_token_losses_and_gradient_match_skyrl(loss_type, clip, seed):
    """SkyRL sums its per-token loss over the mask; the core family's token-sum of the same
    advantages is bit-identical, and so is the gradient of every token (rtol = 0)."""
    case = random_policy_loss_case(seed)
    low, high, c = clip
    mask = case.mask_B_R.bool()

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(seed)  # clip_cov's random choice, from torch's global generator in both
    terms = policy_terms(
        SKYRL_FAMILIES[loss_type],
        ours_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        mask,
        _family_params(low, high, c),
    )
    ours = core_aggregate(terms.pg_losses, mask, "token-sum")
    ours.backward()

    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(seed)
    theirs, _ = PolicyLossRegistry.get(loss_type)(
        theirs_lp, case.old_logprobs_B_R, case.advantages_B_R, config=_family_config(loss_type, low, high, c),
        loss_mask=case.mask_B_R,
    )  # fmt: skip
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    assert ours_lp.grad.abs().sum() > 0


@pytest.mark.parametrize("loss_type", OFF_POLICY_FAMILIES)
def test_rollout_is_weights_reproduce_skyrls_token_tis(loss_type):
    """SkyRL's token TIS (off_policy_correction.tis_ratio_type=token) multiplies each token's loss by
    min(exp(old - rollout), cap), detached; sent as `rollout_is_weights`, the core loss gives the same
    loss and gradient bit for bit."""
    case = random_policy_loss_case(2)
    rollout = case.old_logprobs_B_R + 0.5 * torch.randn(
        case.mask_B_R.shape, generator=torch.Generator().manual_seed(3)
    )
    cap = 1.5
    weights = torch.clamp(torch.exp(torch.clamp(case.old_logprobs_B_R - rollout, -20, 20)), max=cap)
    mask = case.mask_B_R.bool()
    assert (weights[mask] == cap).any() and (weights[mask] < 1).any()

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    params = _family_params(0.2, 0.28, 3.0)
    terms = policy_terms(
        SKYRL_FAMILIES[loss_type], ours_lp, case.old_logprobs_B_R, case.advantages_B_R, mask, params, weights
    )
    ours = core_aggregate(terms.pg_losses, mask, "token-sum")
    ours.backward()

    tis = OffPolicyCorrectionConfig(tis_ratio_type="token", token_tis_ratio_clip_high=cap)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    theirs, metrics = PolicyLossRegistry.get(loss_type)(
        theirs_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        config=_family_config(loss_type, 0.2, 0.28, 3.0, off_policy_correction=tis),
        loss_mask=case.mask_B_R,
        rollout_logprobs=rollout,
    )
    theirs.backward()

    assert metrics["tis_token_clip_high_ratio"] > 0
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
@pytest.mark.parametrize("loss_type", ["regular", "gspo", "sapo", "cispo"])
def test_core_aggregation_equals_skyrls_prescaled_sum_for_linear_families(loss_type, reduction):
    """Pinned: SkyRL pre-scales advantages by its loss_reduction and sums; the Arctic path aggregates
    raw advantages with the mapped loss_agg_mode (the server's normalisers). Every family here is
    linear in A, so the two agree up to float rounding."""
    case = random_policy_loss_case(4, fully_masked_row=False)
    rows = case.mask_B_R.shape[0]
    mask = case.mask_B_R.bool()
    terms = policy_terms(
        SKYRL_FAMILIES[loss_type], case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R, mask,
        _family_params(0.2, 0.28, 3.0),
    )  # fmt: skip
    ours = core_aggregate(
        terms.pg_losses, mask, REDUCTIONS[reduction], batch_num_tokens=case.num_tokens, global_batch_size=rows,
        loss_scale_factor=MAX_SEQ_LEN,
    )  # fmt: skip
    scaled = apply_loss_reduction_to_advantages_minibatch(
        case.advantages_B_R, case.mask_B_R, reduction, micro_batch_size=rows, max_seq_len=MAX_SEQ_LEN
    )
    theirs, _ = PolicyLossRegistry.get(loss_type)(
        case.logprobs_B_R, case.old_logprobs_B_R, scaled, config=_family_config(loss_type, 0.2, 0.28, 3.0),
        loss_mask=case.mask_B_R,
    )  # fmt: skip
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_clip_cov_on_prescaled_advantages_is_where_skyrl_and_verl_differ():
    """Pinned: SkyRL's clip_cov computes its covariance on advantages pre-scaled by loss_reduction, so
    with token_mean its [clip_cov_lb, clip_cov_ub] window selects no token; on raw advantages (verl,
    and the Arctic path) it does. The Arctic path follows verl here."""
    case = random_policy_loss_case(1)
    mask = case.mask_B_R.bool()
    params = _family_params(0.2, 0.28, 3.0)
    torch.manual_seed(0)
    raw = policy_terms(
        "clip_cov", case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R, mask, params
    )
    scaled = case.advantages_B_R / case.num_tokens
    torch.manual_seed(0)
    prescaled = policy_terms("clip_cov", case.logprobs_B_R, case.old_logprobs_B_R, scaled, mask, params)
    assert int((raw.clipped & mask).sum()) > 0 and int((prescaled.clipped & mask).sum()) == 0


def test_parity_covers_every_loss_the_adapter_sends():
    """Every SkyRL policy_loss_type the adapter maps has its bit-for-bit parity test (rollout_is:
    tests/skyrl/test_skyrl_fully_async.py), and every core family is covered by SkyRL's or verl's
    (gpg, dual clip as verl's vanilla: tests/verl/test_parity_verl_loss.py)."""
    from adapter_skyrl.config import SKYRL_POLICY_LOSSES
    from arctic_rl_losses import POLICY_LOSSES

    assert SKYRL_POLICY_LOSSES == {**SKYRL_FAMILIES, "rollout_is": "rollout_is"}
    assert set(POLICY_LOSSES) == {*SKYRL_FAMILIES.values(), "rollout_is", "gpg"}

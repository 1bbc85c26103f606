"""The verl_grpo loss math against an independent float64 re-computation, token by token."""

from __future__ import annotations

import math

import pytest
import torch
from arctic_rl_losses.aggregation import kl_penalty
from arctic_rl_testbed.reference.loss import (
    LOSS_AGG_MODES,
    GlobalBatchInfo,
    GRPOLossConfig,
    aggregate,
    combine_metrics,
    grpo_loss,
    sft_ce_loss,
    sft_loss,
)

B, T = 4, 7


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    logp = old + (torch.rand(B, T, generator=g) - 0.5) * 0.9  # ratios on both sides of the clip range
    adv = torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    mask[2] = 0.0  # one fully masked sequence
    ref = old + (torch.rand(B, T, generator=g) - 0.5) * 0.5
    entropy = torch.rand(B, T, generator=g) * 2
    return logp, old, adv, mask, ref, entropy


# --- an independent float64 re-computation, one token at a time ----------------------------------


def _token_pg(lp, old, a, low, high, c):
    ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high)
    loss = torch.maximum(-a * ratio, -a * clipped_ratio)
    if a.item() < 0:
        loss = torch.minimum(loss, -a * c)
    return loss


def _token_kl(lp, ref, kind):
    if kind in ("k1", "kl"):
        return lp - ref
    if kind == "abs":
        return (lp - ref).abs()
    if kind in ("k2", "mse"):
        return 0.5 * (lp - ref) ** 2
    d = torch.clamp(ref - lp, -20.0, 20.0)
    return torch.clamp(torch.exp(d) - d - 1, -10.0, 10.0)


def _naive_agg(values, mask, mode, dp, bnt, gbs, scale):
    total = torch.zeros((), dtype=torch.float64)
    if mode == "token-mean":
        for b in range(B):
            for t in range(T):
                if mask[b][t]:
                    total = total + values[b][t]
        return total / bnt * dp
    for b in range(B):
        row = [values[b][t] for t in range(T) if mask[b][t]]
        if not row:
            continue
        seq = sum(row[1:], row[0])
        total = total + (seq / len(row) if mode == "seq-mean-token-mean" else seq)
    out = total / gbs * dp
    return out / scale if mode == "seq-mean-token-sum-norm" else out


def _naive_loss(logp, old, adv, mask, ref, entropy, cfg: GRPOLossConfig, info: GlobalBatchInfo):
    m = mask.tolist()
    pg = [
        [
            _token_pg(
                logp[b, t], old[b, t], adv[b, t], cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c
            )
            for t in range(T)
        ]
        for b in range(B)
    ]
    scale = T if info.loss_scale_factor is None else info.loss_scale_factor
    agg = dict(dp=info.dp_size, bnt=info.batch_num_tokens, gbs=info.global_batch_size, scale=scale)
    loss = _naive_agg(pg, m, cfg.loss_agg_mode, **agg)
    loss = loss - cfg.entropy_coeff * _naive_agg(
        [[entropy[b, t] for t in range(T)] for b in range(B)], m, cfg.loss_agg_mode, **agg
    )
    if cfg.use_kl_loss:
        base = cfg.kl_loss_type.removesuffix("+")
        kl = [[_token_kl(logp[b, t], ref[b, t], base) for t in range(T)] for b in range(B)]
        if cfg.kl_loss_type.endswith("+") and base not in ("k2", "mse"):  # straight-through k2 gradient
            k2 = [[_token_kl(logp[b, t], ref[b, t], "k2") for t in range(T)] for b in range(B)]
            kl = [[k2[b][t] - k2[b][t].detach() + kl[b][t].detach() for t in range(T)] for b in range(B)]
        loss = loss + cfg.kl_loss_coef * _naive_agg(kl, m, cfg.loss_agg_mode, **agg)
    return loss


CASES = [
    (mode, kl_type, dp)
    for mode in LOSS_AGG_MODES
    for kl_type, dp in (("low_var_kl", 1), ("k1", 2), ("abs", 1), ("k2", 4), ("k3+", 2), ("kl+", 1))
]


@pytest.mark.parametrize(("mode", "kl_type", "dp"), CASES)
def test_loss_and_gradient_match_float64_recomputation(mode, kl_type, dp):
    logp, old, adv, mask, ref, entropy = _inputs(seed=len(mode) + dp)
    cfg = GRPOLossConfig(
        loss_agg_mode=mode,
        clip_ratio_low=0.15,
        clip_ratio_high=0.28,
        clip_ratio_c=2.5,
        entropy_coeff=0.01,
        use_kl_loss=True,
        kl_loss_coef=0.05,
        kl_loss_type=kl_type,
        loss_scale_factor=None if dp != 2 else 5.0,
    )
    info = GlobalBatchInfo(
        dp_size=dp,
        batch_num_tokens=float(mask.sum()) * dp,
        global_batch_size=3.0 * dp,
        loss_scale_factor=cfg.loss_scale_factor,
    )

    logp32 = logp.clone().requires_grad_(True)
    ent32 = entropy.clone().requires_grad_(True)
    loss32, metrics = grpo_loss(logp32, old, adv, mask, cfg, info, entropy_B_T=ent32, ref_logprobs_B_T=ref)
    loss32.backward()

    logp64 = logp.double().requires_grad_(True)
    ent64 = entropy.double().requires_grad_(True)
    loss64 = _naive_loss(logp64, old.double(), adv.double(), mask, ref.double(), ent64, cfg, info)
    loss64.backward()

    assert loss32.dtype == torch.float32
    assert math.isclose(loss32.item(), loss64.item(), rel_tol=2e-6, abs_tol=1e-7)
    torch.testing.assert_close(logp32.grad.double(), logp64.grad, rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(ent32.grad.double(), ent64.grad, rtol=2e-5, atol=1e-7)
    assert metrics["loss.tokens"] == float(mask.sum())
    assert metrics["kl_coef"] == 0.05


def test_gradcheck_in_float64():
    logp, old, adv, mask, ref, entropy = _inputs(seed=3)
    cfg = GRPOLossConfig(
        loss_agg_mode="seq-mean-token-mean",
        entropy_coeff=0.1,
        use_kl_loss=True,
        kl_loss_coef=0.2,
        kl_loss_type="low_var_kl",
    )
    info = GlobalBatchInfo(dp_size=2, batch_num_tokens=20.0, global_batch_size=6.0)
    logp64 = logp.double().requires_grad_(True)
    ent64 = entropy.double().requires_grad_(True)

    def f(lp, ent):
        return grpo_loss(
            lp, old.double(), adv.double(), mask, cfg, info, entropy_B_T=ent, ref_logprobs_B_T=ref.double()
        )[0]

    assert torch.autograd.gradcheck(f, (logp64, ent64), eps=1e-6, atol=1e-6)


def test_clip_and_dual_clip_values():
    # A > 0, ratio above 1 + high: the clipped term wins; A < 0, large ratio: the dual clip caps the loss.
    logp = torch.tensor([[math.log(1.5), math.log(10.0), math.log(0.5)]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -2.0, -1.0]])
    mask = torch.ones(1, 3)
    cfg = GRPOLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.3, clip_ratio_c=3.0)
    info = GlobalBatchInfo(dp_size=1, batch_num_tokens=3.0, global_batch_size=1.0)
    loss, metrics = grpo_loss(logp, old, adv, mask, cfg, info)
    per_token = [-1.3, 6.0, 0.8]  # -A*min(ratio, 1.3); min(-A*10, -A*3)=6; max(-A*0.5, -A*0.8)=0.8
    assert loss.item() == pytest.approx(sum(per_token) / 3, rel=1e-6)
    assert metrics["actor/pg_clipfrac.sum"] == 2.0  # tokens 0 and 2 were clipped
    assert metrics["actor/pg_clipfrac_lower.sum"] == 1.0  # token 1 hit the dual clip


def test_server_hard_coded_clip_ratios_on_request():
    actor = {"clip_ratio_low": 0.1, "clip_ratio_high": 0.5, "clip_ratio_c": 9.0}
    honoured = GRPOLossConfig.from_meta(actor, {})
    server = GRPOLossConfig.from_meta(actor, {}, honour_clip_ratios=False)
    assert (honoured.clip_ratio_low, honoured.clip_ratio_high, honoured.clip_ratio_c) == (0.1, 0.5, 9.0)
    assert (server.clip_ratio_low, server.clip_ratio_high, server.clip_ratio_c) == (0.2, 0.2, 3.0)
    fallback = GRPOLossConfig.from_meta({"clip_ratio": 0.3, "clip_ratio_low": None}, None)
    assert (fallback.clip_ratio_low, fallback.clip_ratio_high) == (0.3, 0.3)


@pytest.mark.parametrize(
    ("actor", "policy", "match"),
    [
        ({"loss_agg_mode": "mean"}, {}, "loss_agg_mode='mean'"),
        ({"kl_loss_type": "k4"}, {}, "kl_loss_type='k4'"),
        ({"clip_ratio_c": 1.0}, {}, "clip_ratio_c=1.0"),
        ({"entropy_coeff": "0.1"}, {}, "entropy_coeff='0.1'"),
        ({}, {"loss_mode": "gspo"}, "loss_mode='gspo'"),
    ],
)
def test_bad_loss_knobs_are_named(actor, policy, match):
    with pytest.raises(ValueError, match=match):
        GRPOLossConfig.from_meta(actor, policy)


def test_kl_straight_through_keeps_value_and_takes_k2_gradient():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    ref = torch.tensor([-1.5, -1.0])
    value = kl_penalty(logp, ref, "k3+")
    assert torch.equal(value.detach(), kl_penalty(logp, ref, "k3").detach())
    value.sum().backward()
    torch.testing.assert_close(logp.grad, (logp - ref).detach())  # d/dlogp of 0.5 (logp - ref)^2


def test_aggregate_needs_global_counts_with_several_ranks():
    with pytest.raises(ValueError, match="batch_num_tokens is required"):
        aggregate(torch.ones(2, 2), torch.ones(2, 2), "token-mean", dp_size=2)
    local = aggregate(torch.ones(2, 3), torch.tensor([[1.0, 1, 0], [0, 0, 0]]), "seq-mean-token-sum")
    assert local.item() == 2.0  # one non-empty sequence with token sum 2


def test_sft_losses():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=g)
    labels = torch.tensor([[-100, -100, 3, 4, 5], [-100, 7, 8, -100, -100]])
    logp = torch.log_softmax(logits.double(), -1)
    targets = [(0, 1, 3), (0, 2, 4), (0, 3, 5), (1, 0, 7), (1, 1, 8)]  # (row, logits position, label)
    expected_sum = -sum(logp[b, t, y].item() for b, t, y in targets)
    loss, metrics = sft_loss(logits, labels)
    assert loss.item() == pytest.approx(expected_sum / 5, rel=1e-6)
    assert metrics["loss.tokens"] == 5.0
    loss_ce, metrics_ce = sft_ce_loss(logits, labels, global_num_tokens=10, dp_size=2)
    assert loss_ce.item() == pytest.approx(expected_sum / 10 * 2, rel=1e-6)
    assert metrics_ce["loss.sum"] == pytest.approx(expected_sum, rel=1e-6)
    empty, _ = sft_loss(logits, torch.full((2, 5), -100))
    assert empty.item() == 0.0


def test_combine_metrics_like_the_server():
    shards = [
        {"loss.sum": 2.0, "loss.tokens": 4.0, "kl_coef": 0.1},
        {"loss.sum": 1.0, "loss.tokens": 0.0, "kl_coef": 0.1},
        {"loss.sum": 3.0, "loss.tokens": 6.0, "kl_coef": 0.1},
    ]
    assert combine_metrics(shards) == {"loss": 0.6, "kl_coef": pytest.approx(0.1)}

"""Math parity: the reference backend's `verl_grpo` loss equals verl 0.9.1's own policy-loss code,
bit for bit (rtol = 0), on the seeded random cases of `arctic_rl_testbed.parity.loss_cases`.

Compared: `core_algos.get_policy_loss_fn("vanilla")` (vanilla PPO with clip, dual clip, rollout
IS weights, `agg_loss` with the global batch info) against `policy_loss_vanilla` + `aggregate`;
`core_algos.kl_penalty` against `kl_penalty` for every KL type; and verl's whole actor loss
(`verl.workers.utils.losses.ppo_loss`: policy loss - entropy bonus + KL, on jagged TensorDicts)
against `grpo_loss`. Gradients with respect to the current log-probs are compared too.

Global normalisation (pinned): verl's engine sets `dp_size` (its FSDP data-parallel size),
`batch_num_tokens` (response-mask tokens of the whole mini-batch, all-reduced over DP) and
`global_batch_size` (rows of the whole mini-batch); the Arctic server gets the last two in `meta`
(`wire.build_train_payload` counts the whole payload) and injects its own DeepSpeed `dp_size`. Both
then aggregate with the same formulas (token-mean = masked sum / batch_num_tokens * dp_size, ...),
so for the same three numbers the losses are identical; the per-rank `* dp_size` is undone by the
gradient all-reduce mean on both sides (checked below by splitting a batch into ranks and
micro-batches).
"""

from __future__ import annotations

import pytest
import torch
from arctic_rl_losses.aggregation import kl_penalty
from arctic_rl_testbed.parity.loss_cases import PolicyLossCase, random_policy_loss_case
from arctic_rl_testbed.reference.loss import (
    KL_LOSS_TYPES,
    LOSS_AGG_MODES,
    GlobalBatchInfo,
    GRPOLossConfig,
    aggregate,
    grpo_loss,
    policy_loss_vanilla,
)
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
from verl.trainer.ppo.core_algos import kl_penalty as verl_kl_penalty
from verl.utils import tensordict_utils as tu
from verl.workers.config.actor import ActorConfig
from verl.workers.utils.losses import ppo_loss

CLIPS = [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, 1.5)]  # (low, high, c)
# (dp_size, extra tokens / rows on other ranks, loss_scale_factor): local-only and global normalisers
GLOBAL_INFOS = {"local": (1, None, None), "global": (2, (17, 3), 16.0)}


def _verl_actor_config(low: float, high: float, c: float, **kwargs) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        rollout_n=2,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=low,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        **kwargs,
    )


def _global_info(case: PolicyLossCase, name: str, mode: str) -> GlobalBatchInfo:
    dp_size, extra, scale = GLOBAL_INFOS[name]
    return GlobalBatchInfo(
        dp_size=dp_size,
        batch_num_tokens=None if extra is None else case.num_tokens + extra[0],
        global_batch_size=None if extra is None else case.num_sequences + extra[1],
        loss_scale_factor=scale if mode == "seq-mean-token-sum-norm" else None,
    )


def _as_verl_info(info: GlobalBatchInfo) -> dict:
    return {
        "dp_size": info.dp_size,
        "batch_num_tokens": info.batch_num_tokens,
        "global_batch_size": info.global_batch_size,
        "loss_scale_factor": info.loss_scale_factor,
    }


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("with_is_weights", [False, True])
@pytest.mark.parametrize("info_name", sorted(GLOBAL_INFOS))
@pytest.mark.parametrize("clip", CLIPS, ids=[f"clip{lo}-{hi}-c{c}" for lo, hi, c in CLIPS])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_vanilla_policy_loss_and_gradient_match_verl(mode, clip, info_name, with_is_weights, seed):
    case = random_policy_loss_case(seed)
    low, high, c = clip
    info = _global_info(case, info_name, mode)
    weights = case.rollout_is_weights_B_R if with_is_weights else None

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    terms = policy_loss_vanilla(
        ours_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        rollout_is_weights=weights,
    )
    ours = aggregate(
        terms.pg_losses,
        case.mask_B_R,
        mode,
        dp_size=info.dp_size,
        batch_num_tokens=info.batch_num_tokens,
        global_batch_size=info.global_batch_size,
        loss_scale_factor=info.loss_scale_factor,
    )
    ours.backward()

    config = _verl_actor_config(low, high, c, loss_agg_mode=mode)
    config.global_batch_info.update(_as_verl_info(info))
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    theirs, metrics = get_policy_loss_fn("vanilla")(
        old_log_prob=case.old_logprobs_B_R,
        log_prob=theirs_lp,
        advantages=case.advantages_B_R,
        response_mask=case.mask_B_R.bool(),  # verl's ppo_loss passes a bool mask
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=weights,
    )
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    # the clip and the dual clip both bind somewhere in the case (the comparison is not vacuous)
    assert 0 < metrics["actor/pg_clipfrac"] < 1
    if c == 3.0:
        assert metrics["actor/pg_clipfrac_lower"] > 0


@pytest.mark.parametrize("kind", KL_LOSS_TYPES)
def test_kl_penalty_value_and_gradient_match_verl(kind):
    case = random_policy_loss_case(3)
    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    ours = kl_penalty(ours_lp, case.ref_logprobs_B_R, kind)
    theirs = verl_kl_penalty(theirs_lp, case.ref_logprobs_B_R, kind)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    (ours * case.mask_B_R).sum().backward()
    (theirs * case.mask_B_R).sum().backward()
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)


def _verl_actor_batch(case: PolicyLossCase, prompt_lens: list[int], info: GlobalBatchInfo):
    """The jagged TensorDict verl's actor hands `ppo_loss`, and the model output it would see
    (full-sequence, predict-next aligned: response token j of row b at position P_b - 1 + j)."""
    rows = range(case.mask_B_R.shape[0])
    lengths = case.response_lengths_B.tolist()

    def jagged(values_B_R: torch.Tensor) -> torch.Tensor:
        return torch.nested.as_nested_tensor([values_B_R[b, : lengths[b]] for b in rows], layout=torch.jagged)

    def full_sequence(values_B_R: torch.Tensor) -> torch.Tensor:
        out = []
        for b in rows:
            row = torch.zeros(prompt_lens[b] + lengths[b], dtype=values_B_R.dtype)
            row[prompt_lens[b] - 1 : prompt_lens[b] - 1 + lengths[b]] = values_B_R[b, : lengths[b]]
            out.append(row)
        return torch.nested.as_nested_tensor(out, layout=torch.jagged)

    data = tu.get_tensordict(
        tensor_dict={
            "prompts": torch.nested.as_nested_tensor(
                [torch.arange(p, dtype=torch.int64) for p in prompt_lens], layout=torch.jagged
            ),
            "responses": jagged(torch.ones_like(case.mask_B_R, dtype=torch.int64)),
            "response_mask": jagged(case.mask_B_R.to(torch.int64)),
            "old_log_probs": jagged(case.old_logprobs_B_R),
            "advantages": jagged(case.advantages_B_R),
            "ref_log_prob": jagged(case.ref_logprobs_B_R),
        },
        non_tensor_dict={
            "dp_size": info.dp_size,
            "batch_num_tokens": info.batch_num_tokens,
            "global_batch_size": info.global_batch_size,
        },
    )
    return data, full_sequence


@pytest.mark.parametrize("kl_type", ["low_var_kl", "k1", "k2", "abs", "k3+"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_whole_actor_loss_matches_verl_ppo_loss(mode, kl_type):
    """policy loss - entropy_coeff * entropy + kl_coef * KL, aggregated with global normalisers."""
    case = random_policy_loss_case(5)
    entropy_B_R = torch.rand(case.mask_B_R.shape, generator=torch.Generator().manual_seed(9)) * (
        case.response_lengths_B[:, None] > torch.arange(case.mask_B_R.shape[1])[None, :]
    )
    prompt_lens = [3, 1, 4, 2, 5, 2]
    scale = 12.0 if mode == "seq-mean-token-sum-norm" else None
    info = GlobalBatchInfo(2, case.num_tokens + 5, case.num_sequences + 2, scale)
    knobs = dict(entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.05, kl_loss_type=kl_type)

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    ours, ours_metrics = grpo_loss(
        ours_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        case.mask_B_R.bool(),
        GRPOLossConfig(loss_agg_mode=mode, clip_ratio_high=0.28, loss_scale_factor=scale, **knobs),
        info,
        entropy_B_T=entropy_B_R,
        ref_logprobs_B_T=case.ref_logprobs_B_R,
    )
    ours.backward()

    config = _verl_actor_config(0.2, 0.28, 3.0, loss_agg_mode=mode, loss_scale_factor=scale, **knobs)
    data, full_sequence = _verl_actor_batch(case, prompt_lens, info)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    model_output = {"log_probs": full_sequence(theirs_lp), "entropy": full_sequence(entropy_B_R)}
    theirs, theirs_metrics = ppo_loss(config, model_output, data)
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    assert ours_lp.grad.abs().sum() > 0
    assert theirs_metrics["kl_coef"] == ours_metrics["kl_coef"] == 0.05


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_split_across_ranks_and_micro_batches_gives_the_whole_batch_loss(mode):
    """Pins the global normalisation shared by verl and the server: each of 2 ranks x 2
    micro-batches aggregates its rows with the mini-batch's counts and `* dp_size`; summing the
    micro-batches and averaging the ranks (DDP's all-reduce mean) gives the whole-batch loss. Each
    shard is bit-identical between the two; the recombined value differs only by float summation
    order."""
    case = random_policy_loss_case(7, batch_size=8, fully_masked_row=False)
    low, high, c = CLIPS[1]
    config = _verl_actor_config(low, high, c, loss_agg_mode=mode)
    scale = 16.0 if mode == "seq-mean-token-sum-norm" else None
    whole = GlobalBatchInfo(1, case.num_tokens, case.num_sequences, scale)
    split = GlobalBatchInfo(2, case.num_tokens, case.num_sequences, scale)

    def ours(rows: slice, info: GlobalBatchInfo) -> torch.Tensor:
        terms = policy_loss_vanilla(
            case.logprobs_B_R[rows],
            case.old_logprobs_B_R[rows],
            case.advantages_B_R[rows],
            clip_ratio_low=low,
            clip_ratio_high=high,
            clip_ratio_c=c,
        )
        return aggregate(
            terms.pg_losses,
            case.mask_B_R[rows],
            mode,
            dp_size=info.dp_size,
            batch_num_tokens=info.batch_num_tokens,
            global_batch_size=info.global_batch_size,
            loss_scale_factor=info.loss_scale_factor,
        )

    def theirs(rows: slice, info: GlobalBatchInfo) -> torch.Tensor:
        config.global_batch_info.update(_as_verl_info(info))
        loss, _ = get_policy_loss_fn("vanilla")(
            old_log_prob=case.old_logprobs_B_R[rows],
            log_prob=case.logprobs_B_R[rows],
            advantages=case.advantages_B_R[rows],
            response_mask=case.mask_B_R[rows].bool(),
            loss_agg_mode=mode,
            config=config,
        )
        return loss

    shards = [[slice(0, 2), slice(2, 4)], [slice(4, 6), slice(6, 8)]]  # rank -> micro-batches
    per_rank = []
    for micro_batches in shards:
        rank_sum = torch.zeros((), dtype=torch.float32)
        for rows in micro_batches:
            value = ours(rows, split)
            torch.testing.assert_close(value, theirs(rows, split), rtol=0, atol=0)
            rank_sum = rank_sum + value
        per_rank.append(rank_sum)
    recombined = torch.stack(per_rank).mean()
    full = ours(slice(0, 8), whole)
    torch.testing.assert_close(full, theirs(slice(0, 8), whole), rtol=0, atol=0)
    torch.testing.assert_close(recombined, full, rtol=1e-6, atol=1e-7)


def test_server_clip_ratios_are_verls_defaults():
    """Pinned: arctic-platform 0.1.4 uses 0.2 / 0.2 / 3.0 whatever `actor_config` says; the reference
    backend honours what it is sent unless asked to reproduce that (`honour_clip_ratios=False`).
    Both settings equal verl's loss with the corresponding clip ratios."""
    case = random_policy_loss_case(11)
    actor = {"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.28, "clip_ratio_c": 5.0}
    for honour, clip in ((True, (0.1, 0.28, 5.0)), (False, (0.2, 0.2, 3.0))):
        cfg = GRPOLossConfig.from_meta(actor, {"loss_mode": "vanilla"}, honour_clip_ratios=honour)
        assert (cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c) == clip
        terms = policy_loss_vanilla(
            case.logprobs_B_R,
            case.old_logprobs_B_R,
            case.advantages_B_R,
            clip_ratio_low=cfg.clip_ratio_low,
            clip_ratio_high=cfg.clip_ratio_high,
            clip_ratio_c=cfg.clip_ratio_c,
        )
        ours = aggregate(terms.pg_losses, case.mask_B_R, "token-mean")
        verl_config = _verl_actor_config(*clip)
        theirs, _ = get_policy_loss_fn("vanilla")(
            old_log_prob=case.old_logprobs_B_R,
            log_prob=case.logprobs_B_R,
            advantages=case.advantages_B_R,
            response_mask=case.mask_B_R.bool(),
            config=verl_config,
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    # and the two settings really differ on this case
    assert not torch.equal(
        agg_loss(
            policy_loss_vanilla(
                case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R,
                clip_ratio_low=0.1, clip_ratio_high=0.28, clip_ratio_c=5.0,
            ).pg_losses, case.mask_B_R, "token-mean",
        ),
        agg_loss(
            policy_loss_vanilla(
                case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R,
                clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
            ).pg_losses, case.mask_B_R, "token-mean",
        ),
    )  # fmt: skip


# -- arctic_rl_losses: every family verl names, against verl's own registered function ---------

from arctic_rl_losses import LOSS_AGG_MODES as CORE_AGG_MODES  # noqa: E402
from arctic_rl_losses.aggregation import aggregate as core_aggregate  # noqa: E402
from arctic_rl_losses.families import FamilyParams, policy_terms  # noqa: E402
from arctic_rl_losses.policy import GlobalCounts, actor_loss  # noqa: E402
from arctic_rl_losses.settings import LossSettings  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

# verl loss_mode -> core family (the verl adapter's VERL_POLICY_LOSSES, restated so a change shows)
VERL_FAMILIES = {
    "vanilla": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    "gpg": "gpg",
}
# large selection ratios so that clip_cov / kl_cov change some tokens of the small cases
COV = dict(clip_cov_ratio=0.3, kl_cov_ratio=0.3, ppo_kl_coef=0.1)


def _mode_config(loss_mode: str, low: float, high: float, c: float, mode: str, **kwargs) -> ActorConfig:
    policy = PolicyLossConfig(loss_mode=loss_mode, **COV)
    return _verl_actor_config(low, high, c, loss_agg_mode=mode, policy_loss=policy, tau_neg=1.2, **kwargs)


@pytest.mark.parametrize("with_is_weights", [False, True])
@pytest.mark.parametrize("clip", CLIPS[1:], ids=[f"clip{lo}-{hi}-c{c}" for lo, hi, c in CLIPS[1:]])
@pytest.mark.parametrize("mode", CORE_AGG_MODES)
@pytest.mark.parametrize("loss_mode", sorted(VERL_FAMILIES))
def test_core_family_loss_and_gradient_match_verl(loss_mode, mode, clip, with_is_weights):
    """`policy_terms` + `aggregate` == verl's `get_policy_loss_fn(loss_mode)`, rtol = 0 (verl's sapo
    aggregates its policy term with seq-mean-token-mean whatever loss_agg_mode is: the adapter sends
    that as pg_loss_agg_mode)."""
    case = random_policy_loss_case(1)
    low, high, c = clip
    weights = case.rollout_is_weights_B_R if with_is_weights else None
    counts = dict(dp_size=2, batch_num_tokens=case.num_tokens + 7, global_batch_size=case.num_sequences + 2)
    params = FamilyParams(clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c, tau_neg=1.2, **COV)
    mask = case.mask_B_R.bool()

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(0)  # clip_cov draws from torch's global generator, as verl does
    terms = policy_terms(
        VERL_FAMILIES[loss_mode], ours_lp, case.old_logprobs_B_R, case.advantages_B_R, mask, params, weights
    )
    agg_mode = "seq-mean-token-mean" if loss_mode == "sapo" else mode
    ours = core_aggregate(terms.pg_losses, mask, agg_mode, **counts, loss_scale_factor=None)
    ours.backward()

    config = _mode_config(loss_mode, low, high, c, mode)
    config.global_batch_info.update(counts, loss_scale_factor=None)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(0)
    theirs, _ = get_policy_loss_fn(loss_mode)(
        old_log_prob=case.old_logprobs_B_R,
        log_prob=theirs_lp,
        advantages=case.advantages_B_R,
        response_mask=mask,
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=weights,
    )
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    assert ours_lp.grad.abs().sum() > 0


@pytest.mark.parametrize("loss_mode", ["clip_cov", "kl_cov"])
def test_covariance_families_really_select_tokens(loss_mode):
    """Not vacuous: on the cases, the covariance rule changes the loss of some tokens."""
    case = random_policy_loss_case(1)
    mask = case.mask_B_R.bool()
    params = FamilyParams(clip_ratio_high=0.28, **COV)
    torch.manual_seed(0)
    family = policy_terms(
        loss_mode, case.logprobs_B_R, case.old_logprobs_B_R, case.advantages_B_R, mask, params
    )
    ratio = torch.exp(case.logprobs_B_R - case.old_logprobs_B_R)
    baseline_losses = -case.advantages_B_R * ratio  # kl_cov's base: the unclipped -A r
    if loss_mode == "clip_cov":  # clip_cov's base: the PPO clip without the +-20 clamp
        baseline_losses = torch.maximum(baseline_losses, -case.advantages_B_R * torch.clamp(ratio, 0.8, 1.28))
    changed = (family.pg_losses != baseline_losses) & mask
    assert 0 < int(changed.sum()) < int(mask.sum())


@pytest.mark.parametrize("mode", CORE_AGG_MODES)
@pytest.mark.parametrize("loss_mode", sorted(VERL_FAMILIES))
def test_core_actor_loss_matches_verl_ppo_loss_for_every_loss_mode(loss_mode, mode):
    """The whole actor loss (policy - entropy bonus + KL, jagged TensorDicts) per loss_mode, rtol = 0;
    the settings travel as the wire sends them (meta.actor_config / meta.policy_loss_config)."""
    case = random_policy_loss_case(5)
    entropy_B_R = torch.rand(case.mask_B_R.shape, generator=torch.Generator().manual_seed(9)) * (
        case.response_lengths_B[:, None] > torch.arange(case.mask_B_R.shape[1])[None, :]
    )
    prompt_lens = [3, 1, 4, 2, 5, 2]
    scale = 12.0 if mode == "seq-mean-token-sum-norm" else None
    info = GlobalBatchInfo(2, case.num_tokens + 5, case.num_sequences + 2, scale)
    knobs = dict(entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.05, kl_loss_type="low_var_kl")
    actor_config = dict(
        loss_agg_mode=mode, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, **knobs
    )
    if scale is not None:
        actor_config["loss_scale_factor"] = scale
    policy_config = {"loss_mode": VERL_FAMILIES[loss_mode], "tau_neg": 1.2, **COV}
    if loss_mode == "sapo":
        policy_config["pg_loss_agg_mode"] = "seq-mean-token-mean"
    settings = LossSettings.from_meta(actor_config, policy_config)

    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(0)
    ours, _ = actor_loss(
        settings,
        GlobalCounts(info.dp_size, info.batch_num_tokens, info.global_batch_size),
        ours_lp,
        case.old_logprobs_B_R,
        case.advantages_B_R,
        case.mask_B_R.bool(),
        entropy_B_R=entropy_B_R,
        ref_logprobs_B_R=case.ref_logprobs_B_R,
    )
    ours.backward()

    config = _mode_config(loss_mode, 0.2, 0.28, 3.0, mode, loss_scale_factor=scale, **knobs)
    data, full_sequence = _verl_actor_batch(case, prompt_lens, info)
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    torch.manual_seed(0)
    theirs, _ = ppo_loss(
        config, {"log_probs": full_sequence(theirs_lp), "entropy": full_sequence(entropy_B_R)}, data
    )
    theirs.backward()

    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)


def test_parity_covers_every_loss_the_adapter_sends():
    """Every verl loss_mode the adapter maps has its bit-for-bit parity test here; the core families
    verl has no mode for are SkyRL's (ppo_clip = regular, rollout_is: tests/skyrl)."""
    from adapter_verl.config import VERL_POLICY_LOSSES
    from arctic_rl_losses import POLICY_LOSSES

    assert VERL_POLICY_LOSSES == VERL_FAMILIES
    assert set(POLICY_LOSSES) - set(VERL_FAMILIES.values()) == {"ppo_clip", "rollout_is"}

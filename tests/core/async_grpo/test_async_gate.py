"""Staleness gate, truncated IS weights and the per-step metrics: exact values, no engine."""

from __future__ import annotations

import math

import pytest
import torch
from arctic_rl_core.async_grpo.is_weights import combined_is_stats, truncated_is_weights, weights_per_sample
from arctic_rl_core.async_grpo.metrics import METRIC_NAMES, step_metrics
from arctic_rl_core.async_grpo.staleness import StalenessGate, StaleRolloutError
from arctic_rl_core.config import ArcticRLConfig


def test_admit_splits_by_staleness() -> None:
    decision = StalenessGate(1).admit([3, 2, 1, 3], trainer_version=3)
    assert decision.staleness == (0, 1, 2, 0)
    assert decision.kept == (0, 1, 3)
    assert decision.stale == (2,)


def test_k0_admits_only_the_current_version() -> None:
    decision = StalenessGate(0).admit([5, 4], trainer_version=5)
    assert (decision.kept, decision.stale) == ((0,), (1,))


def test_a_version_ahead_of_the_trainer_is_an_error() -> None:
    with pytest.raises(StaleRolloutError, match="ahead of the trainer version 2"):
        StalenessGate(4).admit([3], trainer_version=2)


def test_assert_within_names_the_group_and_the_numbers() -> None:
    with pytest.raises(StaleRolloutError) as caught:
        StalenessGate(1, "regenerate").assert_within([4, 2], trainer_version=4)
    message = str(caught.value)
    assert (
        "rollout group 1" in message
        and "version 2" in message
        and "staleness 2 > async.max_staleness=1" in message
    )
    StalenessGate(2).assert_within([4, 2], trainer_version=4)  # within: no error


def test_may_start_is_the_admission_rule() -> None:
    gate = StalenessGate(1)
    assert gate.may_start(batch_step=3, weights_version=2)
    assert not gate.may_start(batch_step=3, weights_version=1)
    assert StalenessGate(0).may_start(batch_step=3, weights_version=3)
    assert not StalenessGate(0).may_start(batch_step=3, weights_version=2)


def test_from_config_and_bad_settings() -> None:
    cfg = ArcticRLConfig.from_dict({"async": {"max_staleness": 3, "stale_policy": "regenerate"}})
    assert StalenessGate.from_config(cfg) == StalenessGate(3, "regenerate")
    with pytest.raises(ValueError, match="max_staleness=-1"):
        StalenessGate(-1)
    with pytest.raises(ValueError, match="'wait'"):
        StalenessGate(1, "wait")  # type: ignore[arg-type]


def test_truncated_is_weights_exact() -> None:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])
    rollout = torch.tensor([[-1.5, -1.0, -4.0], [-3.0, -200.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    weights, stats = truncated_is_weights(old, rollout, mask, cap=2.0)
    expected = torch.tensor(
        [[math.exp(0.5), math.exp(-1.0), 2.0], [1.0, 2.0, 1.0]], dtype=torch.float32
    )  # exp(3.5) and exp(199) are capped at 2; the masked-out token is 1
    assert torch.equal(weights, expected)
    assert weights.dtype == torch.float32
    assert stats.tokens == 5
    assert stats.clipped_fraction == pytest.approx(2 / 5)
    assert stats.max == 2.0 and stats.min == pytest.approx(math.exp(-1.0))
    assert stats.mean == pytest.approx((math.exp(0.5) + math.exp(-1.0) + 2.0 + 1.0 + 2.0) / 5)
    assert weights_per_sample(weights, [3, 2]) == [expected[0].tolist(), expected[1, :2].tolist()]


def test_is_weights_are_one_on_policy_and_reject_bad_input() -> None:
    lp = torch.randn(2, 4)
    weights, stats = truncated_is_weights(lp, lp.clone(), torch.ones(2, 4, dtype=torch.bool), cap=1.0)
    assert torch.equal(weights, torch.ones(2, 4)) and stats.clipped_fraction == 0.0
    with pytest.raises(ValueError, match=r"cap=0\.5"):
        truncated_is_weights(lp, lp, torch.ones(2, 4), cap=0.5)
    with pytest.raises(ValueError, match="shapes differ"):
        truncated_is_weights(lp, lp[:, :3], torch.ones(2, 4), cap=2.0)


def test_combined_is_stats_equal_the_stats_of_all_tokens_at_once() -> None:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])
    rollout = torch.tensor([[-1.5, -1.0, -4.0], [-3.0, -200.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    _, whole = truncated_is_weights(old, rollout, mask, cap=2.0)
    parts = [
        truncated_is_weights(old[i : i + 1], rollout[i : i + 1], mask[i : i + 1], cap=2.0)[1] for i in (0, 1)
    ]
    empty = truncated_is_weights(old[:1], rollout[:1], torch.zeros(1, 3, dtype=torch.bool), cap=2.0)[1]
    combined = combined_is_stats([parts[0], empty, parts[1]])
    assert combined is not None and combined.tokens == whole.tokens == 5
    assert (combined.max, combined.min) == (whole.max, whole.min)
    assert combined.mean == pytest.approx(whole.mean) and combined.clipped_fraction == pytest.approx(0.4)
    assert combined_is_stats([]) is None and combined_is_stats([empty]) is None


def test_step_metrics_names_and_values() -> None:
    _, stats = truncated_is_weights(
        torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, -5.0]]), torch.ones(1, 2, dtype=torch.bool), cap=3.0
    )
    out = step_metrics(
        max_staleness=2,
        trained_staleness=[0, 1, 2, 2],
        dropped_groups=1,
        regenerated_groups=0,
        is_stats=stats,
    )
    assert tuple(out) == METRIC_NAMES
    assert out["async/staleness_mean"] == 1.25 and out["async/staleness_max"] == 2.0
    assert out["async/trained_groups"] == 4.0 and out["async/dropped_groups"] == 1.0
    assert out["async/is_weight_max"] == 3.0 and out["async/is_weight_clipped_fraction"] == 0.5
    synchronous = step_metrics(
        max_staleness=0, trained_staleness=[0], dropped_groups=0, regenerated_groups=0, is_stats=None
    )
    assert synchronous["async/is_weight_mean"] == 1.0 and synchronous["async/staleness_max"] == 0.0

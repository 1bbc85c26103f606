"""The `async` group (asynchronous GRPO with bounded staleness): defaults, keys and cross-field rules."""

from __future__ import annotations

from typing import Any

import pytest
from arctic_rl_core.config import ArcticRLConfig, ConfigError
from arctic_rl_core.config.sources import apply_overrides

RAY: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-0.6B"},
    "backend": {"kind": "ray"},
    "placement": {"training_gpus": 1, "sampling_gpus": 1},
    "checkpoint": {"path": "ckpt"},
}


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        ArcticRLConfig.from_dict(data)
    return [(issue.path, issue.problem) for issue in caught.value.issues]


def test_default_is_synchronous_and_the_key_is_async() -> None:
    cfg = ArcticRLConfig()
    assert cfg.async_settings.max_staleness == 0
    assert cfg.model_dump()["async"] == {"max_staleness": 0, "stale_policy": "drop", "is_weight_cap": 2.0}
    assert "async" in ArcticRLConfig.model_fields


def test_overrides_reach_the_group() -> None:
    data = apply_overrides(
        dict(RAY), ["async.max_staleness=2", "async.stale_policy=regenerate", "async.is_weight_cap=5"]
    )
    settings = ArcticRLConfig.from_dict(data).async_settings
    assert (settings.max_staleness, settings.stale_policy, settings.is_weight_cap) == (2, "regenerate", 5.0)


def test_misspelt_key_names_the_closest() -> None:
    with pytest.raises(ConfigError) as caught:
        ArcticRLConfig.from_dict({"async": {"max_stalenes": 1}})
    assert "async.max_staleness" in str(caught.value)


def test_colocated_rejected_with_the_reason() -> None:
    problems = _problems({**RAY, "placement": {"colocate": True}, "async": {"max_staleness": 1}})
    assert len(problems) == 1
    path, problem = problems[0]
    assert path == "async.max_staleness"
    assert "take turns" in problem and "cannot overlap" in problem


@pytest.mark.parametrize("kind", ["reference", "ray"])
def test_non_colocated_accepted(kind: str) -> None:
    data = {"backend": {"kind": kind}, "async": {"max_staleness": 1}}
    if kind == "ray":
        data = {**RAY, "async": {"max_staleness": 1}}
    assert ArcticRLConfig.from_dict(data).async_settings.max_staleness == 1


def test_dead_knobs_with_synchronous_rejected() -> None:
    problems = _problems({"async": {"stale_policy": "regenerate", "is_weight_cap": 3.0}})
    assert [path for path, _ in problems] == ["async.stale_policy", "async.is_weight_cap"]
    assert all("max_staleness is 0" in problem for _, problem in problems)


def test_sft_has_nothing_to_overlap() -> None:
    problems = _problems({"loss": {"loss_fn": "sft"}, "async": {"max_staleness": 1}})
    assert problems == [
        (
            "async.max_staleness",
            "supervised training (loss.loss_fn=sft) samples no rollouts, so there is no generation to overlap",
        )
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("max_staleness", -1), ("is_weight_cap", 0.5), ("stale_policy", "wait")]
)
def test_field_bounds(field: str, value: Any) -> None:
    paths = [path for path, _ in _problems({"async": {"max_staleness": 1, field: value}})]
    assert paths == [f"async.{field}"]

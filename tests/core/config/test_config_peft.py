"""`peft.*` (LoRA): what each backend kind accepts, and what the real arctic-platform 0.1.4 client
receives on Cortex (`training.peft` on the training and the sampling sub-job, LoRA-format sync)."""

from __future__ import annotations

from typing import Any

import pytest
from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_core.config.errors import ConfigError

LORA = {"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
PEFT_CONFIG = {
    "peft_type": "Lora",
    "r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "bias": "none",
    "target_modules": ["q_proj", "v_proj"],
}
ARCTIC = {"model": {"name": "Qwen/Qwen3-0.6B"}, "checkpoint": {"path": "/ckpt"}}


def _data(kind: str, peft: dict[str, Any] | None = LORA) -> dict[str, Any]:
    data: dict[str, Any] = {"backend": {"kind": kind}}
    if kind != "reference":
        data.update(ARCTIC)
    if kind == "cortex":
        data["backend"]["cortex"] = {"base_url": "http://127.0.0.1:9"}
    if peft is not None:
        data["peft"] = peft
    return data


@pytest.mark.parametrize("kind", ["ray", "http"])
def test_on_prem_kinds_reject_lora_with_the_reason(kind: str) -> None:
    with pytest.raises(ConfigError) as info:
        ArcticRLConfig.from_dict(_data(kind))
    [issue] = info.value.issues
    assert issue.path == "peft.lora_rank" and issue.value == 8
    assert "on-prem server trains dense only" in issue.problem and f"'{kind}'" in issue.problem
    assert "backend.kind=cortex" in issue.remedy and "peft.lora_rank=0" in issue.remedy


def test_the_real_client_refuses_peft_on_prem_too() -> None:
    """The rule above is 0.1.4's own: its config refuses training.peft with an on-prem backend."""
    from arctic_platform.client import ArcticClientConfig, OnPremConfig, TrainingConfig

    with pytest.raises(ValueError, match="only supported by the remote Cortex backend"):
        ArcticClientConfig(
            model_name="m", training=TrainingConfig(peft=PEFT_CONFIG), backend=OnPremConfig(protocol="ray")
        )


def test_cortex_sends_training_peft_to_both_sub_jobs_and_syncs_in_lora_format() -> None:
    cfg = ArcticRLConfig.from_dict(_data("cortex"))
    plan = cfg.plan()
    assert plan["client"]["training"]["peft"] == PEFT_CONFIG
    assert plan["weight_format"] == "lora"
    client = cfg.to_client_config()
    assert client.training.peft == PEFT_CONFIG
    subs = {sub["job_type"]: sub for sub in client.to_cortex()}
    assert set(subs) == {"training", "sampling"}
    assert subs["training"]["training_config"]["peft_config"] == PEFT_CONFIG
    assert subs["sampling"]["inference_config"]["peft_config"] == PEFT_CONFIG


def test_dense_cortex_sends_no_peft() -> None:
    cfg = ArcticRLConfig.from_dict(_data("cortex", peft=None))
    assert "peft" not in cfg.plan()["client"]["training"] and "weight_format" not in cfg.plan()
    client = cfg.to_client_config()
    assert client.training.peft is None
    assert all("peft_config" not in str(sub) for sub in client.to_cortex())


def test_reference_backend_trains_lora_and_plans_it() -> None:
    plan = ArcticRLConfig.from_dict(_data("reference")).plan()
    assert plan["peft"] == PEFT_CONFIG and plan["weight_format"] == "lora"


def test_lora_settings_without_a_rank_are_reported() -> None:
    with pytest.raises(ConfigError) as info:
        ArcticRLConfig.from_dict(_data("reference", {"lora_alpha": 32, "target_modules": ["q_proj"]}))
    assert sorted(issue.path for issue in info.value.issues) == ["peft.lora_alpha", "peft.target_modules"]
    assert all("peft.lora_rank > 0" in issue.remedy for issue in info.value.issues)


@pytest.mark.parametrize(
    ("peft", "path"),
    [
        ({"lora_rank": 4, "target_modules": []}, "peft.target_modules"),
        ({"lora_rank": 4, "lora_dropout": 1.0}, "peft.lora_dropout"),
        ({"lora_rank": 4, "bias": "some"}, "peft.bias"),
        ({"lora_rank": -1}, "peft.lora_rank"),
        (
            {"lora_rank": 4, "target_modules": ["q_proj"], "exclude_modules": ["q_proj"]},
            "peft.exclude_modules",
        ),
    ],
)
def test_bad_lora_values_name_the_field(peft: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        ArcticRLConfig.from_dict(_data("reference", peft))
    assert [issue.path for issue in info.value.issues] == [path]


def test_fractional_alpha_is_sent_as_is_and_integral_alpha_as_an_int() -> None:
    cfg = ArcticRLConfig.from_dict(_data("reference", {"lora_rank": 4, "lora_alpha": 12.5}))
    assert cfg.peft.peft_config()["lora_alpha"] == 12.5
    cfg = ArcticRLConfig.from_dict(_data("reference", {"lora_rank": 4, "lora_alpha": 32}))
    assert cfg.peft.peft_config()["lora_alpha"] == 32 and isinstance(
        cfg.peft.peft_config()["lora_alpha"], int
    )


def test_the_arctic_backend_syncs_in_lora_format_exactly_when_training_peft_is_set() -> None:
    from arctic_rl_core.backends import arctic_compat

    assert arctic_compat.weight_format(ArcticRLConfig.from_dict(_data("cortex")).to_client_config()) == "lora"
    dense = ArcticRLConfig.from_dict(_data("cortex", peft=None)).to_client_config()
    assert arctic_compat.weight_format(dense) is None


def test_the_settings_table_says_what_trains() -> None:
    from arctic_rl_core.config.settings_table import settings_rows

    rows = dict(settings_rows(ArcticRLConfig.from_dict(_data("cortex"))))
    assert rows["training"] == (
        "LoRA adapters (r 8, alpha 16, on q_proj, v_proj); base frozen, weight sync sends the adapters only"
    )
    assert (
        dict(settings_rows(ArcticRLConfig.from_dict(_data("cortex", peft=None))))["training"]
        == "full weights"
    )

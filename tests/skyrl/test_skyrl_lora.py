"""SkyRL's LoRA settings (`trainer.policy.model.lora.*`) drive `peft.*`: training.peft on Cortex, the
reference engine's adapters, a dry-run refusal with the reason on the on-prem kinds."""

from __future__ import annotations

import pytest
from adapter_skyrl.config import UnsupportedSkyRLSettingError, check_supported, parse_cli, to_arctic_config

LOSS = [
    "trainer.algorithm.policy_loss_type=dual_clip",
    "trainer.algorithm.use_kl_loss=false",  # Cortex has no reference log-probs
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=4",  # one optimizer step per batch (Cortex's old log-probs)
    "trainer.policy.model.path=Qwen/Qwen3-0.6B",
]
CORTEX = [
    *LOSS,
    "trainer.placement.colocate_all=false",
    "trainer.arctic_rl.backend.kind=cortex",
    "trainer.arctic_rl.backend.cortex.base_url=http://127.0.0.1:9",
]
LORA = [
    "trainer.policy.model.lora.rank=16",
    "trainer.policy.model.lora.alpha=32",
    "trainer.policy.model.lora.dropout=0.05",
    "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",
]


def test_skyrl_lora_becomes_training_peft_on_cortex():
    arctic = to_arctic_config(parse_cli([*CORTEX, *LORA]), steps_per_epoch=4)
    expected = {
        "peft_type": "Lora",
        "r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "bias": "none",
        "target_modules": ["q_proj", "v_proj"],
    }
    assert arctic.peft.peft_config() == expected
    subs = {sub["job_type"]: sub for sub in arctic.to_client_config().to_cortex()}
    assert subs["training"]["training_config"]["peft_config"] == expected
    assert subs["sampling"]["inference_config"]["peft_config"] == expected
    assert arctic.plan()["weight_format"] == "lora"


def test_skyrl_default_target_modules_are_all_linear():
    arctic = to_arctic_config(parse_cli([*CORTEX, "trainer.policy.model.lora.rank=8"]), steps_per_epoch=4)
    assert (arctic.peft.lora_rank, arctic.peft.lora_alpha, arctic.peft.target_modules) == (
        8,
        16.0,
        "all-linear",
    )


def test_skyrl_lora_on_ray_is_refused_at_dry_run_with_the_reason():
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(parse_cli([*LOSS, *LORA]), steps_per_epoch=4)
    [problem] = info.value.problems
    assert problem.startswith("trainer.policy.model.lora.rank (core peft.lora_rank) = 16: ")
    assert "on-prem server trains dense only" in problem and "backend.kind=cortex" in problem


def test_skyrl_lora_settings_at_rank_0_are_not_sent():
    arctic = to_arctic_config(parse_cli([*CORTEX, "trainer.policy.model.lora.alpha=64"]), steps_per_epoch=4)
    assert not arctic.peft.enabled and "peft" not in arctic.plan()["client"]["training"]


def test_a_regex_target_module_names_the_skyrl_field():
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(
            parse_cli(
                [
                    *CORTEX,
                    "trainer.policy.model.lora.rank=8",
                    "trainer.policy.model.lora.target_modules=.*proj",
                ]
            ),
            steps_per_epoch=4,
        )
    [problem] = info.value.problems
    assert problem.startswith('trainer.policy.model.lora.target_modules = ".*proj": module names')

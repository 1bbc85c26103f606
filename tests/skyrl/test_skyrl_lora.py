"""SkyRL's LoRA settings (`trainer.policy.model.lora.*`) drive `peft.*`: training.peft on Cortex, the
reference engine's adapters, a dry-run refusal with the reason on the on-prem kinds."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch
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


# -- end to end: SkyRL's RayPPOTrainer.train() training LoRA adapters on the reference engine ------------
E2E_LORA = [
    "trainer.policy.model.lora.rank=4",
    "trainer.policy.model.lora.alpha=8",
    "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",
]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, bird_train_rows):
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from skyrl_e2e_run import run_grpo

    root = tmp_path_factory.mktemp("skyrl_lora")
    data = root / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    exp = run_grpo(
        [
            *E2E_LORA,
            f"data.train_data=['{data}']",
            "trainer.max_training_steps=2",
            f"trainer.ckpt_path={root / 'ckpt'}",
            "trainer.ckpt_interval=100",
            "trainer.resume_mode=none",
        ]
    )
    engine = exp.backend
    assert isinstance(engine, ReferenceBackend)
    # the same engine before training: same seed, same settings
    fresh = ReferenceBackend(engine.settings)
    start = fresh.trainer_parameters()
    asyncio.run(fresh.shutdown())
    return exp, engine, start


def test_skyrl_grpo_trains_lora_adapters_for_two_steps(lora_run):
    from arctic_rl_testbed.reference.lora import is_adapter
    from skyrl_e2e_run import logged_steps

    exp, engine, start = lora_run
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2]
    assert all(math.isfinite(s["policy/policy_loss"]) and s["policy/grad_norm"] > 0 for s in steps.values())
    assert engine.settings.peft == {
        "peft_type": "Lora",
        "r": 4,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": ["q_proj", "v_proj"],
    }
    end = engine.trainer_parameters()
    adapters = sorted(n for n in end if is_adapter(n))
    assert len(adapters) == 4  # 1 layer x (q_proj, v_proj) x (lora_A, lora_B)
    assert sorted(n for n in end if not torch.equal(end[n], start[n])) == adapters  # the base stayed frozen


def test_skyrl_lora_syncs_in_lora_format_and_samples_from_the_adapters(lora_run):
    from skyrl_e2e_run import logged_steps

    exp, engine, _ = lora_run
    sync = engine.last_sync
    assert sync is not None and sync.weight_format == "lora" and sync.transfer.num_tensors == 4
    assert sync.weights_version == engine.global_step > 0
    trainer, sampler = engine.trainer_parameters(), engine.sampler_parameters()
    assert all(torch.equal(trainer[n], sampler[n]) for n in trainer)
    # each step's rollouts came from the newest synced adapters: the sampler's log-probs match training's
    for data in logged_steps(exp).values():
        assert data["policy/rollout_train_logprobs_abs_diff_mean"] < 1e-4
    assert [batch["version"] for batch in exp.generator.batches] == [0, engine.global_step // 2]

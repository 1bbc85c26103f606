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
    from arctic_rl_core.backends.reference.engine import ReferenceBackend
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
    from arctic_rl_core.backends.reference.lora import is_adapter
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


# -- end to end on the Cortex emulator: SkyRL -> ArcticBackend -> the real 0.1.4 CortexTransport -------
@pytest.fixture(scope="module")
def cortex_lora_run(tmp_path_factory, bird_train_rows):
    pytest.importorskip("tenacity")  # arctic-platform[cortex]
    from arctic_rl_core.backends.reference.settings import ReferenceEngineSettings
    from cortex_emulator import PAT, TOKEN_ENV, InProcessCortex
    from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, run_grpo
    from wire_server import tiny_model_dir

    root = tmp_path_factory.mktemp("skyrl_cortex_lora")
    model_dir = tiny_model_dir(root / "model", 7, **TINY_MODEL)
    data = root / "bird.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in bird_train_rows), encoding="utf-8")
    cortex = InProcessCortex(PAT, ReferenceEngineSettings(num_threads=1, colocated=False), root / "files")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(TOKEN_ENV, PAT)
            exp = run_grpo(
                [
                    *cortex.overrides("trainer.arctic_rl."),
                    *E2E_LORA,
                    f"trainer.policy.model.path={model_dir}",
                    f"data.train_data=['{data}']",
                    "trainer.seed=7",
                    "trainer.algorithm.use_kl_loss=false",  # Cortex: no reference log-probs
                    "trainer.algorithm.use_entropy_loss=false",
                    "trainer.policy_mini_batch_size=2",  # one optimizer step per batch (Cortex)
                    "trainer.update_epochs_per_batch=1",
                    "trainer.max_training_steps=2",
                    f"trainer.ckpt_path={root / 'ckpt'}",
                    "trainer.ckpt_interval=100",
                    "trainer.resume_mode=none",
                ],
                base=TINY_GRPO,
            )
        [job] = cortex.emulator.jobs.values()
        assert job.engine is not None
        yield exp, job, model_dir
    finally:
        cortex.stop()


def test_skyrl_lora_on_the_cortex_emulator_trains_and_syncs_adapters(cortex_lora_run):
    from arctic_rl_core.backends.reference.lora import is_adapter
    from skyrl_e2e_run import logged_steps

    exp, job, _ = cortex_lora_run
    # what reached Cortex: training.peft on both sub-jobs (the real client's to_cortex())
    configs = {sub["job_type"]: sub for sub in job.sub_jobs}
    peft = configs["training"]["training_config"]["peft_config"]
    assert peft == configs["sampling"]["inference_config"]["peft_config"] == job.peft
    assert (peft["r"], peft["lora_alpha"], peft["target_modules"]) == (4, 8, ["q_proj", "v_proj"])
    engine = job.engine
    assert sorted(logged_steps(exp)) == [1, 2] and engine.global_step == 2
    # only the adapters trained: the base is still the model directory's weights
    from arctic_rl_core.backends.reference.model import build_model, load_tokenizer

    base_model = build_model(engine.settings.model, 7, load_tokenizer(engine.settings.model))
    base = {f"base_model.model.{n}": p for n, p in base_model.named_parameters()}
    trained = engine.trainer_parameters()
    for name, tensor in trained.items():
        if is_adapter(name):
            continue
        key = name.replace(".base_layer.", ".")
        assert torch.equal(tensor, base[key].detach()), name
    adapters = [n for n in trained if is_adapter(n)]
    assert len(adapters) == 4 and all(
        not torch.equal(trained[n], torch.zeros_like(trained[n])) for n in adapters
    )
    # the client's weight sync asked for LoRA format; only the adapters travelled
    sync = engine.last_sync
    assert sync.weight_format == "lora" and sync.transfer.num_tensors == 4 and sync.weights_version == 2
    sampler = engine.sampler_parameters()
    assert all(torch.equal(sampler[n], trained[n]) for n in trained)

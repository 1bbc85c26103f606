"""Every SkyRL recipe's full override list, exactly as its launcher passes it (the launcher runs in
dry-run mode), through the adapter's real config path: SkyRL's strict parse with
`trainer.arctic_rl.*`, the Arctic support rules, SkyRL's own `validate_cfg`, then the core
`ArcticRLConfig`. A typo'd knob must fail here, without a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from adapter_skyrl.config import UnsupportedSkyRLSettingError, check_supported, parse_cli, to_arctic_config
from recipe_checks import assert_arctic_stack, dry_run, training_overrides

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipes" / "skyrl"
LAUNCHERS = sorted(p for p in RECIPE_DIR.glob("*.sh") if not p.name.startswith("_"))

# Prompts in the training split each recipe's data step writes (sets SkyRL's steps per epoch).
BIRD_TRAIN, GSM8K_TRAIN = 9428, 7473

# What each recipe must deliver, checked on the core config the adapter builds.
EXPECTED: dict[str, dict[str, Any]] = {
    "gsm8k-qwen3-0.6b-4gpu": dict(
        model="Qwen/Qwen3-0.6B", train_size=GSM8K_TRAIN, env_class="gsm8k_arctic", training_gpus=2,
        sampling_gpus=2, colocate=False, engines=2, prompts=64, rollouts=8, grad_accum=16, zorro=False,
        fca=True, spec=None, zero=2,
    ),
    "bird-smoke-qwen3-1.7b-8gpu": dict(
        model="Qwen/Qwen3-1.7B", train_size=16, env_class="bird", training_gpus=8, sampling_gpus=8,
        colocate=True, engines=8, prompts=8, rollouts=8, grad_accum=1, zorro=True, fca=True, spec=None,
        zero=2,
    ),
    "bird-qwen3-8b-32gpu": dict(
        model="Qwen/Qwen3-8B", train_size=BIRD_TRAIN, env_class="bird", training_gpus=32,
        sampling_gpus=32, colocate=True, engines=16, prompts=128, rollouts=8, grad_accum=2, zorro=True,
        fca=True, spec="Snowflake/Arctic-LSTM-Speculator-Qwen3-8B", zero=3,
    ),
    "bird-qwen3-32b-32gpu": dict(
        model="Qwen/Qwen3-32B", train_size=BIRD_TRAIN, env_class="bird", training_gpus=32,
        sampling_gpus=32, colocate=True, engines=4, prompts=128, rollouts=8, grad_accum=4, zorro=True,
        fca=True, spec="Snowflake/Arctic-LSTM-Speculator-Qwen3-32B", zero=3,
    ),
}  # fmt: skip


def test_every_launcher_has_expectations():
    assert {p.stem for p in LAUNCHERS} == set(EXPECTED)


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: p.stem)
def test_recipe_overrides_validate_through_the_skyrl_adapter(launcher: Path, tmp_path: Path):
    import adapter_skyrl.envs  # noqa: F401  (registers the Arctic environments)
    from skyrl.train.utils import validate_cfg
    from skyrl_gym.envs.registration import registry

    want = EXPECTED[launcher.stem]
    commands = dry_run(launcher, tmp_path)
    overrides = training_overrides(commands, "adapter_skyrl.main")
    assert len(overrides) > 30, overrides  # the whole file, not a truncated read

    cfg = parse_cli(overrides)
    check_supported(cfg)
    validate_cfg(cfg)
    arctic = to_arctic_config(cfg, steps_per_epoch=want["train_size"] // cfg.trainer.train_batch_size)

    assert arctic.backend.kind == "ray"
    assert arctic.model.name == want["model"] == cfg.trainer.policy.model.path
    place = arctic.placement
    assert (place.training_gpus, place.sampling_gpus, place.colocate) == (
        want["training_gpus"],
        want["sampling_gpus"],
        want["colocate"],
    )
    shape = arctic.shape
    assert shape.num_sampling_engines == want["engines"]
    assert (arctic.batch.prompts_per_step, arctic.batch.rollouts_per_prompt) == (
        want["prompts"],
        want["rollouts"],
    )
    assert shape.gradient_accumulation_steps == want["grad_accum"]
    assert_arctic_stack(arctic, shape, want)
    # The vLLM context holds the longest prompt plus the longest response.
    assert (
        shape.max_model_len
        == cfg.trainer.max_prompt_length + cfg.generator.sampling_params.max_generate_length
    )

    # Paths: the data the launcher's data step writes, checkpoints under CKPT_DIR.
    home = tmp_path / "home" / "arctic-rl"
    data_dir = Path(cfg.data.train_data[0]).parent
    assert cfg.data.train_data == [str(data_dir / "train.parquet")]
    assert Path(cfg.data.val_data[0]).parent == data_dir
    assert str(data_dir).startswith(str(home / "data"))
    prep = [c for c in commands if c is not commands[-1]]
    assert prep and any(str(data_dir) in arg for c in prep for arg in c), prep
    # SkyRL's trainer.ckpt_path is the Arctic training job's checkpoint directory too
    assert arctic.checkpoint.path == str(home / "ckpt" / f"skyrl-{launcher.stem}" / "skyrl")
    assert cfg.environment.env_class == want["env_class"] and want["env_class"] in registry


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: p.stem)
def test_extra_arguments_and_environment_reach_the_config(launcher: Path, tmp_path: Path):
    overrides = training_overrides(
        dry_run(launcher, tmp_path, "trainer.max_training_steps=50", MODEL="/models/my-qwen", CKPT_DIR="/ck"),
        "adapter_skyrl.main",
    )
    cfg = parse_cli(overrides)
    assert cfg.trainer.max_training_steps == 50  # appended after the file: the user's value wins
    arctic = to_arctic_config(cfg, steps_per_epoch=100)
    assert arctic.model.name == "/models/my-qwen" and arctic.checkpoint.path == "/ck/skyrl"


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: p.stem)
def test_a_typo_in_an_arctic_knob_fails_naming_it(launcher: Path, tmp_path: Path):
    from arctic_rl_core.config import ConfigError

    cfg = parse_cli(
        training_overrides(
            dry_run(launcher, tmp_path, "trainer.arctic_rl.zorro.enabel=true"), "adapter_skyrl.main"
        )
    )
    with pytest.raises(ConfigError) as info:
        to_arctic_config(cfg, steps_per_epoch=100)
    assert [issue.path for issue in info.value.issues] == ["trainer.arctic_rl.zorro.enabel"]


def test_a_typo_in_a_skyrl_knob_fails_in_the_strict_parse(tmp_path: Path):
    overrides = training_overrides(
        dry_run(LAUNCHERS[0], tmp_path, "trainer.train_batch_sise=8"), "adapter_skyrl.main"
    )
    with pytest.raises(ValueError, match="train_batch_sise"):
        parse_cli(overrides)


def test_a_shape_that_does_not_divide_names_the_skyrl_field(tmp_path: Path):
    from arctic_rl_core.config import ConfigError

    launcher = RECIPE_DIR / "bird-qwen3-32b-32gpu.sh"
    # 24 training GPUs x 8 rows per micro-step do not divide the 1024 rows of a step
    cfg = parse_cli(
        training_overrides(
            dry_run(launcher, tmp_path, "trainer.placement.policy_num_nodes=3"), "adapter_skyrl.main"
        )
    )
    with pytest.raises(ConfigError) as info:
        to_arctic_config(cfg, steps_per_epoch=100)
    assert [issue.path for issue in info.value.issues] == [
        "trainer.micro_train_batch_size_per_gpu (core batch.micro_batch_size_per_gpu)"
    ]
    assert "ZoRRo" not in str(info.value)  # the micro-batch is ZoRRo's whole groups; the GPUs do not divide


def test_an_unhonourable_skyrl_setting_fails_naming_it(tmp_path: Path):
    cfg = parse_cli(
        training_overrides(
            dry_run(LAUNCHERS[0], tmp_path, "trainer.policy.model.lora.rank=8"), "adapter_skyrl.main"
        )
    )
    with pytest.raises(
        UnsupportedSkyRLSettingError,
        match=r"lora\.rank \(core peft\.lora_rank\) = 8: arctic-platform 0\.1\.4's on-prem server trains dense only",
    ):
        check_supported(cfg)

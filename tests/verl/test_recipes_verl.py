"""Every verl recipe's full override list, exactly as its launcher passes it (the launcher runs in
dry-run mode), through the adapter's real config path: `adapter_verl.main`'s selection defaults,
verl's Hydra composition of `ppo_trainer` with the shipped `remote_backend/arctic` group, the Arctic
support rules, verl's own startup `validate_config`, and the core `ArcticRLConfig`
(`settings_from_verl`, as the trainer calls it). A typo'd knob must fail here, without a
GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recipe_checks import assert_arctic_stack, dry_run, training_overrides

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipes" / "verl"
LAUNCHERS = sorted(p for p in RECIPE_DIR.glob("*.sh") if not p.name.startswith("_"))

# What each recipe must deliver, checked on the core config the adapter builds.
EXPECTED: dict[str, dict[str, Any]] = {
    "gsm8k-qwen3-0.6b-4gpu": dict(
        model="Qwen/Qwen3-0.6B", reward="pkg://arctic_rl_core.envs.gsm8k", training_gpus=2,
        sampling_gpus=2, colocate=False, engines=2, prompts=64, rollouts=8, grad_accum=16, zorro=False,
        fca=True, spec=None, zero=2, warmup=0,
    ),
    "bird-smoke-qwen3-1.7b-8gpu": dict(
        model="Qwen/Qwen3-1.7B", reward="pkg://arctic_rl_core.envs.bird.reward", training_gpus=8,
        sampling_gpus=8, colocate=True, engines=8, prompts=8, rollouts=8, grad_accum=1, zorro=True,
        fca=True, spec=None, zero=2, warmup=0,
    ),
    "bird-qwen3-8b-32gpu": dict(
        model="Qwen/Qwen3-8B", reward="pkg://arctic_rl_core.envs.bird.reward", training_gpus=32,
        sampling_gpus=32, colocate=True, engines=16, prompts=128, rollouts=8, grad_accum=2, zorro=True,
        fca=True, spec="Snowflake/Arctic-LSTM-Speculator-Qwen3-8B", zero=3, warmup=20,
    ),
    "bird-qwen3-32b-32gpu": dict(
        model="Qwen/Qwen3-32B", reward="pkg://arctic_rl_core.envs.bird.reward", training_gpus=32,
        sampling_gpus=32, colocate=True, engines=4, prompts=128, rollouts=8, grad_accum=4, zorro=True,
        fca=True, spec="Snowflake/Arctic-LSTM-Speculator-Qwen3-32B", zero=3, warmup=10,
    ),
}  # fmt: skip


def compose_as_main(overrides: list[str]):
    """The composed config `python -m adapter_verl.main <overrides>` checks and hands to verl."""
    from adapter_verl.main import compose, with_arctic_defaults

    everything, added = with_arctic_defaults(overrides)
    return compose(everything), added


def test_every_launcher_has_expectations():
    assert {p.stem for p in LAUNCHERS} == set(EXPECTED)


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: p.stem)
def test_recipe_overrides_validate_through_the_verl_adapter(launcher: Path, tmp_path: Path):
    from adapter_verl.config import check_supported, settings_from_verl
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    want = EXPECTED[launcher.stem]
    commands = dry_run(launcher, tmp_path)
    overrides = training_overrides(commands, "adapter_verl.main")
    assert len(overrides) > 40, overrides  # the whole file, not a truncated read

    cfg, added = compose_as_main(overrides)
    assert added == []  # the file spells out every selection override itself
    assert check_supported(cfg) == []
    # verl's own startup validation, as `verl.trainer.main_ppo.main` runs it
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    settings = settings_from_verl(cfg, total_training_steps=cfg.trainer.total_training_steps)
    arctic = settings.arctic_config()

    assert arctic.backend.kind == "ray"
    assert arctic.model.name == want["model"] == settings.model_path
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
    assert (shape.training_horizon, shape.warmup_steps) == (
        cfg.trainer.total_training_steps * shape.optimizer_steps_per_step,
        want["warmup"],
    )
    assert_arctic_stack(arctic, shape, want)
    # verl's lengths are the data lengths; the vLLM context holds both.
    assert (arctic.batch.max_prompt_length, arctic.batch.max_response_length) == (
        cfg.data.max_prompt_length,
        cfg.data.max_response_length,
    )
    assert shape.max_model_len == cfg.data.max_prompt_length + cfg.data.max_response_length

    # The reward is the core's, loaded the way verl loads it.
    assert cfg.reward.custom_reward_function.path == want["reward"]
    reward_fn = get_custom_reward_fn(cfg)
    module = want["reward"].removeprefix("pkg://")
    assert reward_fn.args[0].__module__ == module and reward_fn.args[0].__name__ == "compute_score"

    # Paths: the data the launcher's data step writes, checkpoints under CKPT_DIR.
    home = tmp_path / "home" / "arctic-rl"
    data_dir = Path(cfg.data.train_files[0]).parent
    assert list(cfg.data.train_files) == [str(data_dir / "train.parquet")]
    assert Path(cfg.data.val_files[0]).parent == data_dir
    assert str(data_dir).startswith(str(home / "data"))
    prep = commands[:-1]
    assert prep and any(str(data_dir) in arg for c in prep for arg in c), prep
    ckpt = home / "ckpt" / f"verl-{launcher.stem}"
    # the Arctic training job's checkpoints and verl's own trainer state: verl's checkpoint folder
    assert arctic.checkpoint.path == cfg.trainer.default_local_dir == str(ckpt / "verl")


def test_extra_arguments_and_environment_reach_the_config(tmp_path: Path):
    from adapter_verl.config import settings_from_verl

    launcher = RECIPE_DIR / "bird-qwen3-32b-32gpu.sh"
    extra = ("trainer.total_training_steps=50", "actor_rollout_ref.rollout.gpu_memory_utilization=0.4")
    overrides = training_overrides(
        dry_run(launcher, tmp_path, *extra, MODEL="/models/my-qwen", CKPT_DIR="/ck"), "adapter_verl.main"
    )
    cfg, _ = compose_as_main(overrides)
    arctic = settings_from_verl(cfg, total_training_steps=cfg.trainer.total_training_steps).arctic_config()
    # appended after the file: the user's values win
    assert arctic.optimizer.total_training_steps == 50 and arctic.vllm.gpu_memory_utilization == 0.4
    assert arctic.model.name == "/models/my-qwen" and arctic.checkpoint.path == "/ck/verl"


def test_a_typo_in_an_arctic_knob_fails_naming_it(tmp_path: Path):
    from adapter_verl.config import UnsupportedVerlSettingError, settings_from_verl

    overrides = training_overrides(
        dry_run(LAUNCHERS[0], tmp_path, "+remote_backend.core.zorro.enabel=true"), "adapter_verl.main"
    )
    cfg, _ = compose_as_main(overrides)
    with pytest.raises(UnsupportedVerlSettingError) as info:
        settings_from_verl(cfg, total_training_steps=cfg.trainer.total_training_steps)
    (problem,) = info.value.problems
    assert problem.startswith("remote_backend.core.zorro.enabel = true: unknown key")


def test_a_typo_in_a_verl_knob_fails_in_the_composition(tmp_path: Path):
    from hydra.errors import ConfigCompositionException

    overrides = training_overrides(
        dry_run(LAUNCHERS[0], tmp_path, "data.train_batch_sise=8"), "adapter_verl.main"
    )
    with pytest.raises(ConfigCompositionException, match="train_batch_sise"):
        compose_as_main(overrides)

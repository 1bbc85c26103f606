"""SkyRL's policy_loss_type -> a core loss family, checked through the adapter's real config
translation and the core validation: what runs on an Arctic Ray backend, and what Cortex refuses."""

from __future__ import annotations

import pytest
from adapter_skyrl.config import SKYRL_POLICY_LOSSES, parse_cli, to_arctic_config
from arctic_rl_core.config import ConfigError
from arctic_rl_losses import POLICY_LOSSES, SERVER_LOSS_FN

RAY = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.arctic_rl.backend.kind=ray",
    "trainer.ckpt_path=/ckpt",  # SkyRL's default use_kl_loss=true gets the ref job from its ref placement
    "trainer.policy.model.path=Qwen/Qwen3-0.6B",
]


def _core(*overrides: str):
    return to_arctic_config(parse_cli([*RAY, *overrides]), steps_per_epoch=4)


def test_skyrl_default_regular_validates_on_ray_as_ppo_clip_without_dual_clip():
    cfg = _core()
    assert (cfg.loss.loss_fn, cfg.loss.policy_loss) == ("arctic_rl_core", "ppo_clip")
    assert cfg.server_loss_fn == SERVER_LOSS_FN
    assert (cfg.loss.clip_ratio_low, cfg.loss.clip_ratio_high) == (0.2, 0.2)


def test_dapo_clip_higher_validates_on_ray():
    cfg = _core("trainer.algorithm.eps_clip_high=0.28")
    assert cfg.loss.clip_ratio_high == 0.28 and cfg.loss.policy_loss == "ppo_clip"


@pytest.mark.parametrize("loss_type", sorted(SKYRL_POLICY_LOSSES))
def test_every_supported_policy_loss_type_validates_on_ray(loss_type):
    cfg = _core(f"trainer.algorithm.policy_loss_type={loss_type}")
    assert cfg.loss.policy_loss == SKYRL_POLICY_LOSSES[loss_type] and cfg.loss.policy_loss in POLICY_LOSSES
    assert cfg.loss.loss_fn == "arctic_rl_core"


def test_family_knobs_come_from_skyrl_fields():
    sapo = _core("trainer.algorithm.policy_loss_type=sapo", "trainer.algorithm.sapo.tau_pos=2.0")
    assert sapo.loss.family_params() == {"tau_pos": 2.0, "tau_neg": 1.05}
    cispo = _core(
        "trainer.algorithm.policy_loss_type=cispo",
        "trainer.algorithm.cispo.cispo_eps_clip_low=0.5",
        "trainer.algorithm.cispo.cispo_eps_clip_high=2.0",
    )
    assert (cispo.loss.clip_ratio_low, cispo.loss.clip_ratio_high) == (0.5, 2.0)  # CISPO's own clip
    kl_cov = _core("trainer.algorithm.policy_loss_type=kl_cov", "trainer.algorithm.kl_cov.kl_cov_frac=0.1")
    assert kl_cov.loss.family_params() == {"kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0}


def test_reference_backend_keeps_the_builtin_for_dual_clip_only():
    ref = [
        "trainer.placement.colocate_all=false",
        "generator.inference_engine.enable_ray_prometheus_stats=false",
        "trainer.arctic_rl.backend.kind=reference",
    ]
    dual = to_arctic_config(
        parse_cli([*ref, "trainer.algorithm.policy_loss_type=dual_clip"]), steps_per_epoch=4
    )
    regular = to_arctic_config(parse_cli(ref), steps_per_epoch=4)
    assert dual.loss.loss_fn == "verl_grpo" and regular.loss.loss_fn == "arctic_rl_core"


def test_cortex_runs_only_the_builtin_and_says_why():
    cortex = [
        "trainer.placement.colocate_all=false",
        "generator.inference_engine.enable_ray_prometheus_stats=false",
        "trainer.arctic_rl.backend.kind=cortex",
        "trainer.arctic_rl.backend.cortex.base_url=http://cortex.invalid",
        "trainer.ckpt_path=/ckpt",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.policy_mini_batch_size=1024",
        "trainer.policy.model.path=Qwen/Qwen3-0.6B",
    ]
    ok = to_arctic_config(
        parse_cli([*cortex, "trainer.algorithm.policy_loss_type=dual_clip"]), steps_per_epoch=4
    )
    assert ok.loss.loss_fn == "verl_grpo"
    with pytest.raises(ConfigError) as info:
        to_arctic_config(parse_cli(cortex), steps_per_epoch=4)  # regular
    assert "the built-in verl_grpo loss is dual-clip PPO only" in str(info.value)
    assert "trainer.algorithm.policy_loss_type" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "clip_high"),
    [([], 0.2), (["trainer.algorithm.eps_clip_high=0.28"], 0.28)],
    ids=["regular", "dapo"],
)
def test_done_when_cases_pass_the_dry_run_on_ray_with_no_problem(overrides, clip_high):
    """Issue 16's done-when, through `python -m adapter_skyrl.main --dry-run`: SkyRL's default
    `policy_loss_type=regular` and DAPO's clip-higher on backend.kind=ray, 0 problems, the loss
    named by dotted path for the server to import."""
    import io

    import yaml
    from adapter_skyrl.main import dry_run

    out, err = io.StringIO(), io.StringIO()
    assert dry_run([*RAY, "trainer.logger=console", *overrides], out=out, err=err) == 0, err.getvalue()
    assert "problem" not in err.getvalue()
    document = yaml.safe_load(out.getvalue().split("Arctic RL run settings", 1)[0])
    loss = document["config"]["loss"]
    assert document["config"]["backend"]["kind"] == "ray"
    assert (loss["loss_fn"], loss["policy_loss"], loss["clip_ratio_high"]) == (
        "arctic_rl_core",
        "ppo_clip",
        clip_high,
    )
    assert SERVER_LOSS_FN.startswith("arctic_rl_losses.")

"""verl's policy_loss.loss_mode -> a core loss family, through the adapter's real composed config and
the core validation: what runs on an Arctic Ray backend, and what Cortex refuses."""

from __future__ import annotations

import pytest

BASE = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.model.path=/models/tiny",
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "++remote_backend.core.backend.kind=ray",
    "trainer.default_local_dir=/ckpt",
]


@pytest.fixture(scope="module")
def core():
    from adapter_verl.config import arctic_config_from_verl
    from adapter_verl.main import compose, with_arctic_defaults

    def run(*overrides: str):
        return arctic_config_from_verl(compose(with_arctic_defaults([*BASE, *overrides])[0]), 5)

    return run


def test_gspo_validates_on_ray(core):
    from arctic_rl_losses import SERVER_LOSS_FN

    cfg = core(
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.clip_ratio_high=0.28"
    )
    assert (cfg.loss.loss_fn, cfg.loss.policy_loss, cfg.loss.clip_ratio_high) == (
        "arctic_rl_core",
        "gspo",
        0.28,
    )
    assert cfg.server_loss_fn == SERVER_LOSS_FN


@pytest.mark.parametrize("mode", ["vanilla", "gspo", "sapo", "cispo", "clip_cov", "kl_cov", "gpg"])
def test_every_supported_loss_mode_validates_on_ray(core, mode):
    from adapter_verl.config import VERL_POLICY_LOSSES

    cfg = core(f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}")
    assert cfg.loss.policy_loss == VERL_POLICY_LOSSES[mode] and cfg.loss.loss_fn == "arctic_rl_core"


def test_family_knobs_come_from_verl_fields(core):
    sapo = core("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.tau_neg=1.2")
    # verl's sapo aggregates its policy term per sequence whatever loss_agg_mode says
    assert sapo.loss.pg_loss_agg_mode == "seq-mean-token-mean" and sapo.loss.loss_agg_mode == "token-mean"
    assert sapo.loss.family_params() == {"tau_pos": 1.0, "tau_neg": 1.2}
    clip_cov = core(
        "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ub=4",
    )
    assert clip_cov.loss.family_params() == {"clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 4.0}


def test_cortex_runs_only_the_builtin_and_says_why(core):
    from adapter_verl.config import UnsupportedVerlSettingError

    cortex = [
        "++remote_backend.core.backend.kind=cortex",
        "++remote_backend.core.backend.cortex.base_url=http://c",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        # Cortex runs training and sampling as separate sub-jobs: verl's standalone rollout pool
        "actor_rollout_ref.hybrid_engine=false",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
    ]
    assert core(*cortex).loss.loss_fn == "verl_grpo"  # vanilla
    with pytest.raises(UnsupportedVerlSettingError) as info:
        core(*cortex, "actor_rollout_ref.actor.policy_loss.loss_mode=gspo")
    assert "the built-in verl_grpo loss is dual-clip PPO only" in str(info.value)
    # KL in the reward needs reference log-probs, which Cortex cannot serve: refused naming verl's
    # field, as the SkyRL adapter refuses SkyRL's (tests/skyrl/test_skyrl_config.py)
    with pytest.raises(UnsupportedVerlSettingError) as info:
        core(*cortex, "algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.use_kl_loss=false")
    assert "algorithm.use_kl_in_reward" in str(info.value) and "Cortex has no forward op" in str(info.value)


def test_done_when_gspo_passes_the_dry_run_on_ray_with_no_problem(capsys):
    """Issue 16's done-when, through `python -m adapter_verl.main --dry-run`: verl's
    `policy_loss.loss_mode=gspo` on backend.kind=ray, 0 problems, the loss named by dotted path."""
    import yaml
    from adapter_verl.main import main
    from arctic_rl_losses import SERVER_LOSS_FN

    with pytest.raises(SystemExit) as info:
        main(
            [
                "--dry-run",
                *BASE,
                # verl's own validate_config asks for these (the backend does its own no-grad batching)
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
            ]
        )
    out = capsys.readouterr()
    assert info.value.code == 0, out.err
    assert "problem" not in out.err
    document = yaml.safe_load(out.out.partition("Arctic RL run settings")[0])
    loss = document["config"]["loss"]
    assert document["config"]["backend"]["kind"] == "ray"
    assert (loss["loss_fn"], loss["policy_loss"]) == ("arctic_rl_core", "gspo")
    assert SERVER_LOSS_FN.startswith("arctic_rl_losses.")

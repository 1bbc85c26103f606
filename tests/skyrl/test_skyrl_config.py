"""The trainer.arctic_rl.* extension, SkyRL's strict parse, and rejection of unhonourable settings."""

from __future__ import annotations

import pickle

import pytest
from adapter_skyrl.config import (
    ArcticSkyRLConfig,
    UnsupportedSkyRLSettingError,
    check_supported,
    parse_cli,
    skyrl_owned_values,
    strip_override_entrypoint,
    total_training_steps,
    training_horizon,
)

# The smallest set of SkyRL overrides the Arctic path accepts.
SUPPORTED = [
    "trainer.placement.colocate_all=false",
    "generator.inference_engine.enable_ray_prometheus_stats=false",
    "trainer.algorithm.policy_loss_type=dual_clip",
]


def test_override_entrypoint_is_stripped_and_arctic_groups_parse():
    argv = [
        "trainer.override_entrypoint=adapter_skyrl.main",
        *SUPPORTED,
        "trainer.arctic_rl.backend.kind=reference",
    ]
    assert strip_override_entrypoint(argv) == argv[1:]
    cfg = parse_cli(argv)
    assert isinstance(cfg, ArcticSkyRLConfig)
    assert cfg.trainer.arctic_rl == {"backend": {"kind": "reference"}}
    assert cfg.trainer.placement.colocate_all is False
    check_supported(cfg)  # no error
    again = pickle.loads(pickle.dumps(cfg))  # Ray ships configs between processes
    assert type(again) is ArcticSkyRLConfig and again.trainer.arctic_rl == cfg.trainer.arctic_rl


def test_unknown_skyrl_fields_are_still_rejected_by_the_strict_parse():
    with pytest.raises(ValueError, match="not_a_field"):
        parse_cli([*SUPPORTED, "trainer.not_a_field=1"])


def test_stock_defaults_are_rejected_all_at_once_with_remedies():
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(parse_cli([]))
    problems = info.value.problems
    assert len(problems) == 2  # SkyRL's default policy_loss_type=regular runs (arctic_rl_core.losses)
    assert problems[0].startswith(
        "trainer.placement.colocate_all=True: set trainer.placement.colocate_all=false"
    )
    assert "enable_ray_prometheus_stats=True" in problems[1]


@pytest.mark.parametrize(
    ("override", "path", "remedy"),
    [
        ("trainer.critic.model.path=/m", "trainer.critic.model.path", "no critic"),
        ("trainer.algorithm.advantage_estimator=gae", "trainer.algorithm.advantage_estimator", "critic-free"),
        ("trainer.algorithm.policy_loss_type=rollout_is", "trainer.algorithm.policy_loss_type", "dual_clip"),
        ("trainer.algorithm.cispo.cispo_anchor=rollout", "trainer.algorithm.cispo.cispo_anchor", "old"),
        ("trainer.algorithm.loss_reduction=prompt_mean", "trainer.algorithm.loss_reduction", "token_mean"),
        (
            "trainer.algorithm.loss_reduction=token_mean_legacy",
            "trainer.algorithm.loss_reduction",
            "aggregates",
        ),
        ("trainer.algorithm.off_policy_correction.tis_ratio_type=token", "tis_ratio_type", "off-policy"),
        ("trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.rank", "rank=0"),
        ("trainer.update_ref_every_epoch=true", "trainer.update_ref_every_epoch", "fixed"),
        ("trainer.hf_save_interval=5", "trainer.hf_save_interval", "hf_save_interval=-1"),
        ("trainer.policy.torch_profiler_config.enable=true", "torch_profiler_config.enable", "false"),
        ("trainer.fully_async.enabled=true", "trainer.fully_async.enabled", "synchronous"),
        ("generator.max_turns=3", "generator.max_turns", "single-turn"),
        ("generator.sampling_params.min_p=0.1", "generator.sampling_params.min_p", "min_p"),
        ("generator.sampling_params.repetition_penalty=1.1", "repetition_penalty", "repetition"),
        ("generator.sampling_params.logprobs=5", "generator.sampling_params.logprobs", "sampled token"),
        ("trainer.algorithm.kl_estimator_type=k9", "trainer.algorithm.kl_estimator_type", "k3"),
        ("trainer.algorithm.kl_ctrl.type=adaptive", "kl_ctrl.type", "fixed"),
        ("trainer.policy_mini_batch_size=3", "trainer.policy_mini_batch_size", "divide"),
        (
            "trainer.arctic_rl.optimizer.lr=0.1",
            "trainer.arctic_rl.optimizer",
            "trainer.policy.optimizer_config",
        ),
        ("trainer.arctic_rl.loss.kl_loss_coef=0.1", "trainer.arctic_rl.loss", "trainer.algorithm"),
        ("trainer.arctic_rl.batch.rollouts_per_prompt=2", "trainer.arctic_rl.batch", "n_samples_per_prompt"),
        ("trainer.policy.optimizer_config.scheduler=linear", "optimizer_config.scheduler", "cosine"),
    ],
)
def test_each_unhonourable_setting_names_field_value_and_fix(override, path, remedy):
    cfg = parse_cli([*SUPPORTED, "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=2", override])
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(cfg)
    assert len(info.value.problems) == 1, info.value.problems
    (problem,) = info.value.problems
    assert path in problem and remedy in problem, problem


def test_skyrl_fields_map_to_core_names_with_real_skyrl_names():
    cfg = parse_cli(
        [
            *SUPPORTED,
            "trainer.train_batch_size=8",
            "trainer.policy_mini_batch_size=4",
            "trainer.update_epochs_per_batch=2",
            "trainer.epochs=3",
            "trainer.max_training_steps=5",
            "generator.n_samples_per_prompt=4",
            "trainer.policy.optimizer_config.adam_betas=[0.8,0.95]",
            "trainer.policy.optimizer_config.lr=3e-5",
            "trainer.algorithm.eps_clip_low=0.2",
            "trainer.algorithm.eps_clip_high=0.28",
            "trainer.algorithm.loss_reduction=sequence_mean",
            "trainer.algorithm.use_entropy_loss=true",
            "trainer.algorithm.entropy_loss_coef=0.02",
            "generator.sampling_params.temperature=0.7",
        ]
    )
    # 10 batches per epoch x 3 epochs capped at 5 global steps; 2 mini-batches x 2 update epochs each.
    assert total_training_steps(cfg, steps_per_epoch=10) == 5
    assert training_horizon(cfg, steps_per_epoch=10) == 5 * 2 * 2
    values = skyrl_owned_values(cfg, steps_per_epoch=10)
    assert values["optimizer.betas"] == (0.8, 0.95)
    assert values["optimizer.lr"] == 3e-5
    assert values["optimizer.total_training_steps"] == 5
    assert values["optimizer.scheduler"] == "constant"  # SkyRL's constant_with_warmup
    assert (values["loss.clip_ratio_low"], values["loss.clip_ratio_high"]) == (0.2, 0.28)
    assert values["loss.loss_agg_mode"] == "seq-mean-token-mean"
    assert values["loss.entropy_coeff"] == 0.02
    assert values["loss.temperature"] == 0.7
    assert values["loss.kl_loss_type"] == "k3" and values["loss.use_kl_loss"] is True
    assert values["batch.rollouts_per_prompt"] == 4 and values["batch.epochs"] == 2
    assert values["batch.mini_batch_prompts"] == 4 and values["batch.prompts_per_step"] == 8


def test_arctic_only_fields_of_skyrl_owned_groups_stay_settable():
    cfg = parse_cli(
        [*SUPPORTED, "trainer.arctic_rl.optimizer.eps=1e-6", "trainer.arctic_rl.loss.loss_fn=sft"]
    )
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(cfg)
    assert info.value.problems == [
        "trainer.arctic_rl.loss.loss_fn: SkyRL owns this setting; set trainer.algorithm.policy_loss_type instead"
    ]


def test_to_arctic_config_builds_the_core_schema_from_skyrl_fields():
    from adapter_skyrl.config import to_arctic_config

    cfg = parse_cli(
        [
            *SUPPORTED,
            "trainer.arctic_rl.backend.kind=reference",
            "trainer.arctic_rl.backend.reference.num_layers=1",
            "trainer.arctic_rl.optimizer.eps=1e-6",
            "trainer.train_batch_size=4",
            "trainer.policy_mini_batch_size=2",
            "generator.n_samples_per_prompt=2",
            "trainer.policy.optimizer_config.num_warmup_steps=2",
        ]
    )
    arctic = to_arctic_config(cfg, steps_per_epoch=5)
    assert arctic.backend.kind == "reference" and arctic.backend.reference.num_layers == 1
    assert arctic.optimizer.eps == 1e-6 and arctic.optimizer.weight_decay == 0.01  # SkyRL's default
    assert arctic.model.name is None  # the reference engine builds its own model
    shape = arctic.shape
    # 5 global steps x 2 mini-batches: SkyRL's policy_num_training_steps; warmup in optimizer steps.
    assert (shape.training_horizon, shape.warmup_steps) == (10, 2)
    assert (shape.train_batch_size, shape.mini_batches_per_step, shape.gradient_accumulation_steps) == (
        4,
        2,
        4,
    )
    assert arctic.loss.kl_loss_type == "k3" and arctic.loss.use_kl_loss is True


def test_core_config_errors_name_the_skyrl_field_to_change():
    from adapter_skyrl.config import to_arctic_config
    from arctic_rl_core.config import ConfigError

    http = [
        *SUPPORTED,
        "trainer.arctic_rl.backend.kind=http",
        "trainer.arctic_rl.backend.server_has_arctic_rl_core=false",  # only the built-in verl_grpo
        "trainer.arctic_rl.placement.log_prob_gpus=1",
        "trainer.policy.model.path=Qwen/Qwen3-0.6B",
    ]
    cfg = parse_cli([*http, "trainer.algorithm.eps_clip_high=0.28"])
    with pytest.raises(ConfigError) as info:
        to_arctic_config(cfg, steps_per_epoch=5)
    paths = sorted(issue.path for issue in info.value.issues)
    assert paths == [
        "trainer.algorithm.eps_clip_high (core loss.clip_ratio_high)",
        "trainer.arctic_rl.checkpoint.path",
    ]
    assert "in SkyRL: set trainer.algorithm.eps_clip_high" in str(info.value)
    fixed = parse_cli(
        [*http, "trainer.algorithm.eps_clip_high=0.2", "trainer.arctic_rl.checkpoint.path=/ckpt"]
    )
    assert to_arctic_config(fixed, steps_per_epoch=5).model.name == "Qwen/Qwen3-0.6B"

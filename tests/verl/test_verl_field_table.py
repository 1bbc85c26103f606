"""The verl mapping table over the INSTALLED verl's composed `ppo_trainer` config: every leaf is
classified (a new verl release cannot add a silently ignored field), every mapped verl field
reaches its core field, and the README's table is the table."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def default_leaves():
    from adapter_verl.config import default_leaves

    return default_leaves()


def test_every_leaf_of_the_installed_default_config_is_classified(default_leaves):
    from adapter_verl.field_table import OPTIONAL_FIELDS, VERL_FIELDS

    settings = [path for path in default_leaves if not path.endswith("._target_")]
    assert len(settings) > 800  # data, actor_rollout_ref, algorithm, trainer, reward, ...
    for group in ("data.", "actor_rollout_ref.", "algorithm.", "trainer.", "reward."):
        assert any(p.startswith(group) for p in settings), group
    VERL_FIELDS.check_complete([*settings, *OPTIONAL_FIELDS])
    assert VERL_FIELDS.stale(settings) == list(OPTIONAL_FIELDS)


def test_an_unknown_leaf_is_caught(default_leaves):
    from adapter_verl.field_table import VERL_FIELDS

    assert VERL_FIELDS.unclassified(["trainer_next.new_knob", "actor_rollout_ref.brand_new"]) == [
        "actor_rollout_ref.brand_new",
        "trainer_next.new_knob",
    ]


def test_the_core_fields_mapped_exist_in_the_schema():
    from adapter_verl.field_table import VERL_FIELDS
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.config.errors import all_leaf_paths

    assert VERL_FIELDS.core_fields() <= set(all_leaf_paths(ArcticRLConfig))


# verl override -> (core field, the value it must carry); one composition for all of them
MAPPED = {
    "trainer.nnodes=2": ("placement.training_gpus", 8),
    "trainer.n_gpus_per_node=4": ("placement.sampling_gpus", 8),
    "actor_rollout_ref.hybrid_engine=true": ("placement.colocate", True),
    "actor_rollout_ref.rollout.tensor_model_parallel_size=4": ("placement.sampling_tensor_parallel_size", 4),
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.45": ("vllm.gpu_memory_utilization", 0.45),
    "actor_rollout_ref.rollout.max_num_seqs=96": ("vllm.max_num_seqs", 96),
    "actor_rollout_ref.rollout.enable_prefix_caching=false": ("vllm.enable_prefix_caching", False),
    "actor_rollout_ref.rollout.max_num_batched_tokens=12345": ("vllm.max_num_batched_tokens", 12345),
    "actor_rollout_ref.rollout.enforce_eager=true": ("vllm.enforce_eager", True),
    "actor_rollout_ref.rollout.max_model_len=3000": ("vllm.max_model_len", 3000),
    "actor_rollout_ref.rollout.logprobs_mode=raw_logprobs": ("vllm.logprobs_mode", "raw_logprobs"),
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4": ("vllm.engine_args", {"swap_space": 4}),
    "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_3": (
        "kernels.attn_implementation",
        "flash_attention_3",
    ),
    "actor_rollout_ref.model.use_liger=true": ("kernels.use_liger", True),
    "actor_rollout_ref.model.enable_gradient_checkpointing=false": ("kernels.gradient_checkpointing", False),
    # verl's budget is per Ulysses rank; the Arctic job runs no SP: a GPU holds the SP group's 2 x 9000
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=9000": ("batch.max_token_len_per_gpu", 18000),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2": ("batch.max_token_len_per_gpu", 18000),
    "actor_rollout_ref.actor.optim.lr_warmup_steps=7": ("optimizer.warmup_steps", 7),
    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]": (
        "checkpoint.export_hf",
        True,
    ),
    "actor_rollout_ref.model.use_fused_kernels=true": ("kernels.use_liger", True),
    "actor_rollout_ref.actor.fsdp_config.param_offload=true": ("deepspeed.offload_param", True),
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true": ("deepspeed.offload_optimizer", True),
    "actor_rollout_ref.actor.fsdp_config.full_determinism=true": ("determinism.full", True),
    "data.seed=1234": ("determinism.seed", 1234),
    "trainer.default_local_dir=/ckpt/run7": ("checkpoint.path", "/ckpt/run7"),
    "trainer.max_actor_ckpt_to_keep=3": ("checkpoint.save_total_limit", 3),
    "algorithm.use_kl_in_reward=true": ("loss.use_kl_in_reward", True),
    "data.train_batch_size=16": ("batch.prompts_per_step", 16),
    "actor_rollout_ref.rollout.n=4": ("batch.rollouts_per_prompt", 4),
    "actor_rollout_ref.actor.ppo_mini_batch_size=8": ("batch.mini_batch_prompts", 8),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2": ("batch.micro_batch_size_per_gpu", 2),
    "actor_rollout_ref.actor.optim.lr=2e-6": ("optimizer.lr", 2e-6),
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine": ("optimizer.scheduler", "cosine"),
    "actor_rollout_ref.actor.optim.min_lr_ratio=0.1": ("optimizer.min_lr_ratio", 0.1),
    "actor_rollout_ref.actor.use_kl_loss=true": ("placement.log_prob_gpus", 8),
    "actor_rollout_ref.actor.kl_loss_coef=0.02": ("loss.kl_loss_coef", 0.02),
    "actor_rollout_ref.rollout.temperature=0.8": ("loss.temperature", 0.8),
}


def test_each_verl_field_reaches_its_core_field():
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults

    cfg = compose(with_arctic_defaults(["algorithm.adv_estimator=grpo", *MAPPED])[0])
    translation = translate_fields(cfg)
    assert translation.issues == []
    for override, (core, want) in MAPPED.items():
        assert translation.values[core] == want, override
    # fields at verl's default are mapped too (verl's defaults are the user's settings)
    assert translation.values["optimizer.weight_decay"] == 0.01
    assert translation.values["vllm.enable_chunked_prefill"] is True


def test_verls_default_logprobs_mode_reaches_the_engine_config():
    """verl 0.9.1 defaults rollout.logprobs_mode to processed_logprobs: it is mapped (not rejected) and
    ends in the vllm_config the Arctic client sends, so the sampler's log-probs are temperature-scaled."""
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.config.engine_args import build_engine_args

    cfg = compose(with_arctic_defaults(["algorithm.adv_estimator=grpo"])[0])
    assert cfg.actor_rollout_ref.rollout.logprobs_mode == "processed_logprobs"
    translation = translate_fields(cfg)
    assert translation.issues == []
    assert translation.values["vllm.logprobs_mode"] == "processed_logprobs"
    raw = ArcticRLConfig.model_validate({"vllm": {"logprobs_mode": "raw_logprobs"}})
    assert build_engine_args(raw).args["logprobs_mode"] == "raw_logprobs"


def test_non_colocated_sampling_gpus_are_the_standalone_rollout_pool():
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults

    cfg = compose(
        with_arctic_defaults(
            [
                "trainer.n_gpus_per_node=2",
                "actor_rollout_ref.hybrid_engine=false",
                "actor_rollout_ref.rollout.nnodes=1",
                "actor_rollout_ref.rollout.n_gpus_per_node=6",
            ]
        )[0]
    )
    values = translate_fields(cfg).values
    assert (values["placement.training_gpus"], values["placement.sampling_gpus"]) == (2, 6)
    assert values["placement.colocate"] is False


def test_not_applicable_settings_are_listed_and_interpolations_at_default_are_not():
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults

    cfg = compose(
        with_arctic_defaults(
            [
                "actor_rollout_ref.ref.fsdp_config.param_offload=true",
                # ref.log_prob_max_token_len_per_gpu follows it by interpolation: not listed
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=9000",
                "critic.ppo_epochs=3",
            ]
        )[0]
    )
    listed = {(s.field, s.value) for s in translate_fields(cfg).not_applied}
    assert listed == {("actor_rollout_ref.ref.fsdp_config.param_offload", True), ("critic.ppo_epochs", 3)}


def test_readme_carries_the_table():
    from adapter_verl.field_table import VERL_FIELDS
    from arctic_rl_core.config.framework_fields import marked_section

    readme = (REPO / "packages" / "adapter-verl" / "README.md").read_text(encoding="utf-8")
    assert marked_section(readme, "verl-fields") == VERL_FIELDS.markdown()


def test_the_check_is_the_same_on_the_config_verl_resolves():
    """The trainer sees the config after verl's `OmegaConf.resolve`: no interpolation left. Fields
    that followed their default interpolation must still count as at their default there."""
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults
    from omegaconf import OmegaConf

    cfg = compose(
        with_arctic_defaults(
            [
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=9000",
                "actor_rollout_ref.ref.fsdp_config.param_offload=true",
            ]
        )[0]
    )
    before = translate_fields(cfg)
    OmegaConf.resolve(cfg)
    after = translate_fields(cfg)
    assert after.values == before.values and after.issues == before.issues == []
    assert [s.field for s in after.not_applied] == ["actor_rollout_ref.ref.fsdp_config.param_offload"]


def test_the_table_calls_only_named_transforms():
    from adapter_verl import field_transforms
    from adapter_verl.field_table import VERL_FIELDS
    from field_table_checks import assert_functions_are_named_transforms

    assert_functions_are_named_transforms(VERL_FIELDS, field_transforms)

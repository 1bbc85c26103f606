"""verl config -> core config: the shipped Hydra group composes with verl's own config, verl's
settings are read by their real names, and what the Arctic path cannot honour is rejected."""

from __future__ import annotations

import pytest

BASE = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.model.path=/models/tiny",
    "data.train_batch_size=4",
    "data.max_prompt_length=96",
    "data.max_response_length=24",
    "actor_rollout_ref.rollout.n=3",
    "actor_rollout_ref.rollout.temperature=0.7",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
    "actor_rollout_ref.actor.ppo_epochs=2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.05",
    "actor_rollout_ref.actor.kl_loss_type=k3",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.optim.lr=3e-6",
    "actor_rollout_ref.actor.optim.weight_decay=0.0",
    "actor_rollout_ref.actor.optim.clip_grad=0.5",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "remote_backend.core.backend.kind=reference",
]


@pytest.fixture(scope="module")
def compose():
    from adapter_verl.main import compose as compose_verl
    from adapter_verl.main import with_arctic_defaults

    def run(*overrides: str, base: list[str] = BASE):
        return compose_verl(with_arctic_defaults([*base, *overrides])[0])

    return run


def test_arctic_group_is_found_on_the_package_search_path(compose):
    cfg = compose("remote_backend.trace_dir=/tmp/trace", "+remote_backend.core.zorro.enable=true")
    assert cfg.trainer.v1.trainer_mode == "arctic"
    assert cfg.actor_rollout_ref.rollout.name == "arctic"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cfg.remote_backend.core.backend.kind == "reference"
    assert compose(base=[]).remote_backend.core.backend.kind == "ray"  # the shipped group's default
    assert cfg.remote_backend.trace_dir == "/tmp/trace"
    assert cfg.remote_backend.core.zorro.enable is True


def test_verl_settings_map_into_the_core_schema_by_their_real_names(compose):
    from adapter_verl.config import settings_from_verl

    settings = settings_from_verl(compose("data.seed=7"), total_training_steps=5)
    cfg = settings.arctic_config()
    assert settings.model_path == "/models/tiny"
    assert (cfg.batch.prompts_per_step, cfg.batch.rollouts_per_prompt) == (4, 3)
    assert (cfg.batch.mini_batch_prompts, cfg.batch.micro_batch_size_per_gpu, cfg.batch.epochs) == (2, 3, 2)
    assert (cfg.batch.max_prompt_length, cfg.batch.max_response_length) == (96, 24)
    assert cfg.optimizer.lr == 3e-6 and cfg.optimizer.weight_decay == 0.0 and cfg.optimizer.grad_clip == 0.5
    assert cfg.optimizer.total_training_steps == 5 and cfg.optimizer.scheduler == "constant"
    assert cfg.loss.clip_ratio_high == 0.28 and cfg.loss.loss_agg_mode == "seq-mean-token-sum"
    assert (cfg.loss.use_kl_loss, cfg.loss.kl_loss_coef, cfg.loss.kl_loss_type) == (True, 0.05, "k3")
    assert cfg.loss.entropy_coeff == 0.01 and cfg.loss.temperature == 0.7
    assert cfg.determinism.seed == 7
    # 2 prompts x 3 rollouts per mini-batch, 3 rows per micro-step: 2 accumulation steps
    assert cfg.shape.gradient_accumulation_steps == 2 and cfg.shape.optimizer_steps_per_step == 4


def test_payload_spec_follows_the_mapped_config(compose):
    from adapter_verl.config import settings_from_verl
    from arctic_rl_core.wire import PayloadSpec

    cfg = settings_from_verl(compose(), total_training_steps=5).arctic_config()
    spec = PayloadSpec.from_config(cfg, pad_token_id=11)
    assert (spec.pad_token_id, spec.max_prompt_len, spec.max_response_len, spec.rollout_n) == (11, 96, 24, 3)
    assert (spec.grad_accum_steps, spec.dp_size, spec.temperature) == (2, 1, 0.7)
    assert spec.calculate_entropy and spec.entropy_coeff == 0.01
    assert (spec.use_kl_loss, spec.kl_loss_coef, spec.kl_loss_type, spec.clip_ratio_high) == (
        True,
        0.05,
        "k3",
        0.28,
    )


def test_settings_arctic_cannot_honour_are_all_rejected_at_once(compose):
    from adapter_verl.config import UnsupportedVerlSettingError, settings_from_verl

    cfg = compose(
        "algorithm.adv_estimator=gae",
        "actor_rollout_ref.rollout.pipeline_model_parallel_size=2",
        "actor_rollout_ref.model.tiled_mlp.enabled=true",
        "actor_rollout_ref.model.lora.rank=8",  # verl's Megatron LoRA (the Arctic LoRA is model.lora_rank)
        "actor_rollout_ref.actor.policy_loss.loss_mode=dppo_tv",
        "algorithm.use_kl_in_reward=true",
        "+remote_backend.core.loss.kl_loss_coef=0.1",
        "+remote_backend.core.batch.epochs=3",
        "+remote_backend.core.vllm.gpu_memory_utilization=0.3",
        "+remote_backend.core.zorro.enabel=true",  # a core problem in the same round
    )
    with pytest.raises(UnsupportedVerlSettingError) as info:
        settings_from_verl(cfg, total_training_steps=5)
    text = str(info.value)
    for expected in (
        "algorithm.adv_estimator='gae'",
        "actor_rollout_ref.rollout.pipeline_model_parallel_size = 2",
        "actor_rollout_ref.model.tiled_mlp.enabled = true",
        "actor_rollout_ref.model.lora.rank = 8: verl's Megatron-Bridge LoRA (model.lora.*) belongs to verl's "
        "Megatron engine; the Arctic LoRA adapters (training.peft) are set by actor_rollout_ref.model.lora_rank",
        'actor_rollout_ref.actor.policy_loss.loss_mode = "dppo_tv": the Arctic server computes',
        "remote_backend.core.loss.kl_loss_coef=0.1: verl owns it: set actor_rollout_ref.actor.kl_loss_coef",
        "remote_backend.core.batch.epochs=3: verl owns it: set actor_rollout_ref.actor.ppo_epochs",
        "remote_backend.core.vllm.gpu_memory_utilization=0.3: verl owns it: set "
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "remote_backend.core.zorro.enabel",
    ):
        assert expected in text, (expected, text)
    assert len(info.value.problems) == 9, text
    # the loss settings' own checks assume a loss the server computes: none follows the refused loss
    assert "loss.clip_ratio" not in text


def test_verl_default_estimator_is_rejected_so_grpo_must_be_explicit(compose):
    from adapter_verl.config import check_supported

    base = [o for o in BASE if not o.startswith("algorithm.adv_estimator")]
    problems = check_supported(compose(base=base))
    assert problems == [
        "algorithm.adv_estimator='gae': GAE needs a critic, which the Arctic path has not: "
        "set algorithm.adv_estimator=grpo"
    ]


def test_the_bird_agent_loop_needs_its_turn_limit(compose):
    from adapter_verl.bird_agent_loop import AGENT_NAME
    from adapter_verl.config import check_supported

    bird = f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}"
    assert check_supported(compose(bird)) == [
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=None: the adapter's bird_sql_agent loop needs "
        "the episode's turn limit: set it to the N of `arctic-rl bird preprocess --max-turns N` (the turns the "
        "rows' prompt promises)"
    ]
    assert check_supported(compose(bird, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3")) == []


def test_a_micro_batch_is_fitted_to_the_rows_each_gpu_trains(compose):
    """2 prompts x 3 rollouts on one GPU: verl would run micro-batches of 4 and 2 rows, DeepSpeed needs
    equal ones: 3 (with a notice). On 4 GPUs the 6 rows of a mini-batch do not split at all: a problem
    naming verl's fields, its fix typeable as given."""
    from adapter_verl.config import resolve

    resolution = resolve(compose("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"), 5)
    assert resolution.problems == [] and resolution.config.batch.micro_batch_size_per_gpu == 3
    assert any(
        n.startswith(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 -> 3: each GPU trains 6 rows of a mini-batch"
        )
        for n in resolution.notices
    ), resolution.notices
    problems = resolve(
        compose("trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"), 5
    ).problems
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu / actor_rollout_ref.actor.use_dynamic_bsz (core "
        "batch.micro_batch_size_per_gpu) = 1: a mini-batch has 2 prompts x 3 rollouts = 6 rows, not divisible by "
        "data-parallel size 4"
    )
    assert (
        "Fix: change actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, actor_rollout_ref.actor.ppo_mini_batch_size"
        in problems[0]
    )


def test_core_schema_errors_surface_with_the_core_field(compose):
    from adapter_verl.config import UnsupportedVerlSettingError, settings_from_verl

    with pytest.raises(
        UnsupportedVerlSettingError, match=r"remote_backend\.core\.determinism\.sed = 1: unknown key"
    ):
        settings_from_verl(compose("+remote_backend.core.determinism.sed=1"), total_training_steps=5)


def test_main_adds_only_the_selection_overrides_the_user_did_not_give():
    from adapter_verl.main import with_arctic_defaults

    overrides, added = with_arctic_defaults(["actor_rollout_ref.rollout.name=arctic", "x=1"])
    assert "actor_rollout_ref.rollout.name=arctic" not in added
    assert "+remote_backend=arctic" in added and "trainer.v1.trainer_mode=arctic" in added
    assert overrides[-2:] == ["actor_rollout_ref.rollout.name=arctic", "x=1"]
    assert overrides.count("actor_rollout_ref.rollout.name=arctic") == 1


def test_verl_loads_the_core_rewards_by_package_path(compose, tmp_path):
    """`reward.custom_reward_function.path=pkg://...` through verl's own loader: BIRD scores by
    executing the SQL against the sample database, GSM8K by the final answer."""
    import pyarrow.parquet as pq
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, preprocess
    from arctic_rl_core.envs.bird.sample import sample_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn

    preprocess(sample_dir(tmp_path / "cache"), tmp_path / "data", PreprocessOptions(), show_progress=False)
    row = pq.read_table(tmp_path / "data" / "train.parquet").to_pylist()[0]
    bird = get_custom_reward_fn(
        compose(
            "reward.custom_reward_function.path=pkg://arctic_rl_core.envs.bird.reward",
            "reward.custom_reward_function.name=compute_score",
        )
    )
    gold = row["reward_model"]["ground_truth"]
    right = bird(row["data_source"], f"```sql\n{gold}\n```", gold, row["extra_info"])
    wrong = bird(row["data_source"], "```sql\nSELECT 1 WHERE 0\n```", gold, row["extra_info"])
    assert (right["score"], right["correct"], right["execution_success"]) == (1.0, True, True)
    assert (wrong["correct"], wrong["execution_success"]) == (False, True) and wrong["score"] < 1.0

    gsm8k = get_custom_reward_fn(
        compose(
            "reward.custom_reward_function.path=pkg://arctic_rl_core.envs.gsm8k",
            "reward.custom_reward_function.name=compute_score",
        )
    )
    assert gsm8k("openai/gsm8k", "63 * 3 = 189\n#### 189", "189")["score"] == 1.0
    assert gsm8k("openai/gsm8k", "#### 188", "189")["score"] == 0.0


def test_checkpoints_kept_is_the_servers_save_total_limit(compose):
    """verl's trainer.max_actor_ckpt_to_keep is checkpoint.save_total_limit (as SkyRL's
    trainer.max_ckpts_to_keep is): null or <= 0 keeps all, as verl's own checkpoint managers do."""
    from adapter_verl.config import UnsupportedVerlSettingError, settings_from_verl

    def kept(*overrides: str):
        return settings_from_verl(compose(*overrides), total_training_steps=5).arctic_config().checkpoint

    assert kept("trainer.max_actor_ckpt_to_keep=2").save_total_limit == 2
    assert (
        kept().save_total_limit is None and kept("trainer.max_actor_ckpt_to_keep=0").save_total_limit is None
    )
    with pytest.raises(UnsupportedVerlSettingError, match=r"set trainer\.max_actor_ckpt_to_keep"):
        kept("+remote_backend.core.checkpoint.save_total_limit=3")  # one setting, in verl's field


def test_kl_in_reward_gets_a_log_prob_job(compose):
    """As in the SkyRL adapter: verl's algorithm.use_kl_in_reward runs with reference log-probs from the
    Arctic log-prob job (as many GPUs as training, verl's reference shares the actor's); verl's own
    apply_kl_penalty subtracts it from the rewards, so the server loss has no KL term."""
    from adapter_verl.config import settings_from_verl

    cfg = settings_from_verl(
        compose(
            "algorithm.use_kl_in_reward=true",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "algorithm.kl_ctrl.kl_coef=0.002",
        ),
        total_training_steps=5,
    ).arctic_config()
    assert cfg.loss.use_kl_in_reward is True and cfg.loss.use_kl_loss is False
    assert cfg.placement.log_prob_gpus == cfg.placement.training_gpus


LORA = [
    "actor_rollout_ref.model.lora_rank=16",
    "actor_rollout_ref.model.lora_alpha=32",
    "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
]


def test_verl_lora_maps_to_peft_and_trains_on_the_reference_engine(compose):
    from adapter_verl.config import settings_from_verl

    cfg = settings_from_verl(compose(*LORA), total_training_steps=5).arctic_config()
    assert cfg.peft.peft_config() == {
        "peft_type": "Lora",
        "r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": ["q_proj", "v_proj"],
    }
    assert cfg.plan()["weight_format"] == "lora"
    # verl's default target_modules (all-linear) and alpha at rank > 0
    cfg = settings_from_verl(
        compose("actor_rollout_ref.model.lora_rank=4"), total_training_steps=5
    ).arctic_config()
    assert (cfg.peft.lora_rank, cfg.peft.lora_alpha, cfg.peft.target_modules) == (4, 16.0, "all-linear")


def test_verl_lora_on_ray_is_refused_with_the_reason(compose):
    from adapter_verl.config import UnsupportedVerlSettingError, settings_from_verl

    with pytest.raises(UnsupportedVerlSettingError) as info:
        settings_from_verl(
            compose(
                *LORA, "remote_backend.core.backend.kind=ray", "actor_rollout_ref.actor.use_kl_loss=false"
            ),
            total_training_steps=5,
        )
    text = str(info.value)
    assert (
        "actor_rollout_ref.model.lora_rank (core peft.lora_rank) = 16: arctic-platform 0.1.4's on-prem"
        in text
    )
    assert "backend.kind=cortex" in text


def test_verl_lora_alpha_at_rank_0_is_not_sent(compose):
    from adapter_verl.config import settings_from_verl

    cfg = settings_from_verl(
        compose("actor_rollout_ref.model.lora_alpha=64"), total_training_steps=5
    ).arctic_config()
    assert not cfg.peft.enabled and "peft" not in cfg.plan()


def test_verls_mini_batch_shuffle_is_served_with_its_seed(compose):
    # verl's own iterator shuffles the step's rows (in dataloader order: adapter_verl.batch_order),
    # seeded by data_loader_seed; both settings are verl's and reach its update_actor call unchanged
    from adapter_verl.config import settings_from_verl

    cfg = compose("actor_rollout_ref.actor.shuffle=true", "actor_rollout_ref.actor.data_loader_seed=7")
    settings = settings_from_verl(cfg, total_training_steps=5)
    assert settings.arctic_config().batch.epochs == 2
    assert (cfg.actor_rollout_ref.actor.shuffle, cfg.actor_rollout_ref.actor.data_loader_seed) == (True, 7)

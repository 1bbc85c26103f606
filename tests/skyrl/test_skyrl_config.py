"""SkyRL's own fields drive the Arctic run: the trainer.arctic_rl.* extension, SkyRL's strict parse,
the translation through the field table, and every problem at once with field, value and fix."""

from __future__ import annotations

import pickle

import pytest
from adapter_skyrl.config import (
    ArcticSkyRLConfig,
    UnsupportedSkyRLSettingError,
    check_supported,
    parse_cli,
    strip_override_entrypoint,
    to_arctic_config,
    total_training_steps,
    translate,
)

SUPPORTED = ["trainer.algorithm.policy_loss_type=dual_clip"]
REFERENCE = [*SUPPORTED, "trainer.arctic_rl.backend.kind=reference"]


def test_override_entrypoint_is_stripped_and_arctic_groups_parse():
    argv = ["trainer.override_entrypoint=adapter_skyrl.main", *REFERENCE]
    assert strip_override_entrypoint(argv) == argv[1:]
    cfg = parse_cli(argv)
    assert isinstance(cfg, ArcticSkyRLConfig)
    assert cfg.trainer.arctic_rl == {"backend": {"kind": "reference"}}
    check_supported(cfg)  # no error
    again = pickle.loads(pickle.dumps(cfg))  # Ray ships configs between processes
    assert type(again) is ArcticSkyRLConfig and again.trainer.arctic_rl == cfg.trainer.arctic_rl


def test_unknown_skyrl_fields_are_still_rejected_by_the_strict_parse():
    with pytest.raises(ValueError, match="not_a_field"):
        parse_cli([*SUPPORTED, "trainer.not_a_field=1"])


@pytest.mark.parametrize("extension", [[], ["trainer.arctic_rl={}"]])
def test_no_arctic_keys_or_an_empty_mapping_work(extension):
    arctic = to_arctic_config(parse_cli([*SUPPORTED, *extension]), steps_per_epoch=4)
    assert arctic.backend.kind == "ray"


def test_default_backend_is_the_arctic_server_on_ray_and_the_reference_engine_only_when_named():
    arctic = to_arctic_config(parse_cli(SUPPORTED), steps_per_epoch=4)
    assert arctic.backend.kind == "ray" and arctic.is_arctic
    assert arctic.model.name == "Qwen/Qwen2.5-1.5B-Instruct"  # SkyRL's trainer.policy.model.path
    # the legacy integrations' optimisations are on with the Arctic backend
    assert (arctic.zorro.enable, arctic.kernels.use_liger, arctic.arctic_inference.fca) == (True, True, True)
    reference = to_arctic_config(parse_cli(REFERENCE), steps_per_epoch=4)
    assert reference.backend.kind == "reference" and reference.model.name is None
    assert reference.zorro.enable is False


def test_stock_defaults_pass_with_skyrls_own_loss():
    result = translate(parse_cli([]), steps_per_epoch=4)
    assert result.issues == []
    assert (result.arctic.loss.loss_fn, result.arctic.loss.policy_loss) == ("arctic_rl_core", "ppo_clip")


@pytest.mark.parametrize(
    ("override", "path", "remedy"),
    [
        ("trainer.critic.model.path=/m", "trainer.critic.model.path", "unset trainer.critic.model.path"),
        ("trainer.algorithm.advantage_estimator=gae", "trainer.algorithm.advantage_estimator", "grpo"),
        ("trainer.algorithm.policy_loss_type=dppo", "trainer.algorithm.policy_loss_type", "rollout_is"),
        ("trainer.policy.model.lora.max_loras=2", "trainer.policy.model.lora.max_loras", "leave it at 1"),
        ("trainer.update_ref_every_epoch=true", "trainer.update_ref_every_epoch", "fixed"),
        ("trainer.policy.torch_profiler_config.enable=true", "torch_profiler_config.enable", "false"),
        ("trainer.fully_async.simulate_training=true", "trainer.fully_async.simulate_training", "false"),
        ("generator.merge_stepwise_output=true", "generator.merge_stepwise_output", "set it to false"),
        ("generator.sampling_params.min_p=0.1", "generator.sampling_params.min_p", "min_p"),
        ("generator.eval_sampling_params.min_p=0.1", "generator.eval_sampling_params.min_p", "min_p"),
        ("generator.sampling_params.repetition_penalty=1.1", "repetition_penalty", "repetition"),
        ("generator.sampling_params.logprobs=5", "generator.sampling_params.logprobs", "sampled token"),
        ("trainer.algorithm.kl_estimator_type=k9", "trainer.algorithm.kl_estimator_type", "k3"),
        ("trainer.algorithm.kl_ctrl.type=adaptive", "kl_ctrl.type", "fixed"),
        ("trainer.policy_mini_batch_size=3", "trainer.policy_mini_batch_size", "divides"),
        ("trainer.strategy=megatron", "trainer.strategy", "DeepSpeed"),
        (
            "generator.inference_engine.data_parallel_size=2",
            "inference_engine.data_parallel_size",
            "num_engines",
        ),
        (
            "trainer.arctic_rl.optimizer.lr=0.1",
            "trainer.arctic_rl.optimizer.lr",
            "trainer.policy.optimizer_config.lr",
        ),
        (
            "trainer.arctic_rl.loss.kl_loss_coef=0.1",
            "trainer.arctic_rl.loss.kl_loss_coef",
            "trainer.algorithm",
        ),
        ("trainer.arctic_rl.batch.rollouts_per_prompt=2", "trainer.arctic_rl.batch", "n_samples_per_prompt"),
        (
            "trainer.arctic_rl.placement.training_gpus=8",
            "trainer.arctic_rl.placement",
            "policy_num_gpus_per_node",
        ),
        (
            "trainer.arctic_rl.placement.colocate=false",
            "trainer.arctic_rl.placement.colocate",
            "colocate_all",
        ),
        ("trainer.policy.optimizer_config.scheduler=linear", "optimizer_config.scheduler", "cosine"),
        ("trainer.arctic_rl.zorro.enabel=true", "trainer.arctic_rl.zorro.enabel", "zorro.enable"),
    ],
)
def test_each_unhonourable_setting_names_field_value_and_fix(override, path, remedy):
    cfg = parse_cli([*REFERENCE, "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=2", override])
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(cfg, steps_per_epoch=4)
    assert len(info.value.problems) == 1, info.value.problems
    (problem,) = info.value.problems
    assert path in problem and remedy in problem, problem


def test_every_problem_at_once():
    cfg = parse_cli(
        [
            "trainer.policy.model.path=Qwen/Qwen3-0.6B",
            "trainer.policy.model.lora.rank=8",  # a SkyRL setting
            "trainer.arctic_rl.zorro.enabel=true",  # a core key typo
            "trainer.arctic_rl.deepspeed.offload_param=true",  # core validation: needs ZeRO-3
            "trainer.arctic_rl.arctic_inference_config={zorro_inference:{enable:true}}",  # a changed legacy key
        ]
    )
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(cfg, steps_per_epoch=4)
    paths = sorted(issue.path for issue in info.value.issues)
    assert paths == [
        "trainer.arctic_rl.arctic_inference_config",
        "trainer.arctic_rl.deepspeed.offload_param",
        "trainer.arctic_rl.zorro.enabel",
        "trainer.policy.model.lora.rank (core peft.lora_rank)",  # LoRA on ray: on-prem trains dense only
    ]
    assert "parameter offload needs ZeRO stage 3" in str(info.value)


def test_skyrl_fields_drive_placement_engines_kernels_and_budgets():
    cfg = parse_cli(
        [
            *SUPPORTED,
            "trainer.placement.policy_num_gpus_per_node=8",
            "trainer.placement.policy_num_nodes=4",
            "trainer.placement.ref_num_gpus_per_node=8",
            "trainer.placement.ref_num_nodes=4",
            "generator.inference_engine.num_engines=8",
            "generator.inference_engine.tensor_parallel_size=4",
            "generator.inference_engine.gpu_memory_utilization=0.5",
            "generator.inference_engine.max_num_seqs=64",
            "generator.inference_engine.enable_prefix_caching=false",
            "generator.inference_engine.max_num_batched_tokens=16384",
            "generator.inference_engine.enforce_eager=true",
            "trainer.gradient_checkpointing=false",
            "trainer.policy.fsdp_config.cpu_offload=true",
            "trainer.max_tokens_per_microbatch=20000",
            "trainer.seed=7",
            "trainer.ckpt_path=/shared/ckpt",
            "trainer.train_batch_size=64",
            "trainer.policy_mini_batch_size=32",
            "generator.n_samples_per_prompt=8",
            "trainer.max_prompt_length=1024",
            "generator.max_input_length=1024",
            "generator.sampling_params.max_generate_length=2048",
            "trainer.arctic_rl.kernels.attn_implementation=flash_attention_3",
        ]
    )
    arctic = to_arctic_config(cfg, steps_per_epoch=10)
    place = arctic.placement
    assert (place.training_gpus, place.sampling_gpus, place.sampling_tensor_parallel_size) == (32, 32, 4)
    assert (place.log_prob_gpus, place.colocate) == (32, True)
    assert arctic.shape.num_sampling_engines == 8 and arctic.shape.data_parallel_size == 32
    vllm = arctic.vllm
    assert (vllm.gpu_memory_utilization, vllm.max_num_seqs, vllm.enable_prefix_caching) == (0.5, 64, False)
    assert (vllm.max_num_batched_tokens, vllm.enforce_eager) == (16384, True)
    assert arctic.kernels.attn_implementation == "flash_attention_3"
    assert arctic.kernels.gradient_checkpointing is False
    assert arctic.deepspeed.offload_optimizer is True
    assert arctic.batch.max_token_len_per_gpu == 20000
    assert arctic.determinism.seed == 7 and arctic.checkpoint.path == "/shared/ckpt"
    # ZoRRo (on by default): micro-batches of whole prompt groups
    assert arctic.batch.micro_batch_size_per_gpu == 8


def test_skyrl_batch_optimizer_and_loss_fields_map_with_their_transforms():
    cfg = parse_cli(
        [
            *REFERENCE,
            "trainer.train_batch_size=8",
            "trainer.policy_mini_batch_size=4",
            "trainer.update_epochs_per_batch=2",
            "trainer.epochs=3",
            "trainer.max_training_steps=5",
            "generator.n_samples_per_prompt=4",
            "trainer.policy.optimizer_config.adam_betas=[0.8,0.95]",
            "trainer.policy.optimizer_config.lr=3e-5",
            "trainer.policy.optimizer_config.num_warmup_steps=2",
            "trainer.algorithm.loss_reduction=sequence_mean",
            "trainer.algorithm.use_entropy_loss=true",
            "trainer.algorithm.entropy_loss_coef=0.02",
            "generator.sampling_params.temperature=0.7",
            "trainer.algorithm.temperature=null",
            "trainer.flash_attn=false",
            "trainer.micro_train_batch_size_per_gpu=2",
        ]
    )
    assert total_training_steps(cfg, steps_per_epoch=10) == 5
    arctic = to_arctic_config(cfg, steps_per_epoch=10)
    assert arctic.optimizer.betas == (0.8, 0.95) and arctic.optimizer.lr == 3e-5
    assert arctic.optimizer.total_training_steps == 5 and arctic.optimizer.scheduler == "constant"
    # 5 global steps x 2 mini-batches x 2 update epochs = 20 optimizer steps; 2 of them warm up
    assert (arctic.shape.training_horizon, arctic.shape.warmup_steps) == (20, 2)
    assert arctic.loss.loss_agg_mode == "seq-mean-token-mean" and arctic.loss.entropy_coeff == 0.02
    assert arctic.loss.temperature == 0.7 and arctic.loss.kl_loss_type == "k3"
    assert arctic.kernels.attn_implementation == "sdpa"  # trainer.flash_attn=false
    assert arctic.batch.micro_batch_size_per_gpu == 2  # no ZoRRo on the reference backend: as is


def test_flash_attn_and_the_attention_implementation_must_agree():
    cfg = parse_cli(
        [
            *REFERENCE,
            "trainer.flash_attn=false",
            "trainer.arctic_rl.kernels.attn_implementation=flash_attention_3",
        ]
    )
    with pytest.raises(UnsupportedSkyRLSettingError, match=r"trainer.flash_attn=true"):
        check_supported(cfg)


def test_kl_in_reward_gets_a_log_prob_job_or_is_rejected():
    cfg = parse_cli(
        [*SUPPORTED, "trainer.algorithm.use_kl_loss=false", "trainer.algorithm.use_kl_in_reward=true"]
    )
    arctic = to_arctic_config(cfg, steps_per_epoch=4)
    assert arctic.loss.use_kl_in_reward is True and arctic.loss.use_kl_loss is False
    assert arctic.placement.log_prob_gpus == 1  # SkyRL's ref placement: 1 node x 1 GPU
    assert arctic.plan()["jobs"]["log_prob"]["job_type"] == "log_prob"
    cortex = parse_cli(
        [
            *SUPPORTED,
            "trainer.algorithm.use_kl_loss=false",
            "trainer.algorithm.use_kl_in_reward=true",
            "trainer.placement.colocate_all=false",
            "trainer.arctic_rl.backend.kind=cortex",
            "trainer.arctic_rl.backend.cortex.base_url=http://cortex.invalid",
        ]
    )
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(cortex, steps_per_epoch=4)
    problems = "\n".join(info.value.problems)
    assert "trainer.algorithm.use_kl_in_reward / " not in problems  # named by the SkyRL field alone
    assert "Cortex has no forward op" in problems and "trainer.algorithm.use_kl_in_reward" in problems


def test_settings_that_do_not_apply_are_listed_not_dropped():
    cfg = parse_cli(
        [*REFERENCE, "trainer.policy.fsdp_config.fsdp_size=4", "trainer.critic.optimizer_config.lr=1e-4"]
    )
    result = translate(cfg, steps_per_epoch=4)
    assert result.issues == []
    listed = {s.field: s.value for s in result.not_applied}
    assert listed == {"trainer.policy.fsdp_config.fsdp_size": 4, "trainer.critic.optimizer_config.lr": 1e-4}


def test_rollout_correction_settings_are_accepted_for_the_wire():
    for override in (
        "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
        "trainer.algorithm.use_tis=true",
    ):
        assert translate(parse_cli([*REFERENCE, override]), steps_per_epoch=4).issues == []


def test_sequence_parallelism_is_skyrls_field_and_the_core_says_what_the_server_cannot_do():
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(
            parse_cli(
                [
                    *SUPPORTED,
                    "trainer.policy.sequence_parallel_size=2",
                    "trainer.placement.policy_num_gpus_per_node=2",
                    "trainer.algorithm.use_kl_loss=false",
                ]
            ),
            steps_per_epoch=4,
        )
    (issue,) = info.value.issues
    assert (
        issue.path == "trainer.policy.sequence_parallel_size (core placement.ulysses_sequence_parallel_size)"
    )


def test_checkpoints_kept_is_the_servers_save_total_limit():
    """SkyRL's trainer.max_ckpts_to_keep is checkpoint.save_total_limit (as verl's
    trainer.max_actor_ckpt_to_keep is): -1 keeps all; 0 (SkyRL would delete every checkpoint) is refused."""

    def kept(*overrides: str):
        return to_arctic_config(parse_cli([*REFERENCE, *overrides]), steps_per_epoch=4).checkpoint

    assert kept("trainer.max_ckpts_to_keep=3").save_total_limit == 3
    assert kept().save_total_limit is None  # SkyRL's default -1
    with pytest.raises(UnsupportedSkyRLSettingError) as info:
        check_supported(parse_cli([*REFERENCE, "trainer.max_ckpts_to_keep=0"]), steps_per_epoch=4)
    assert "trainer.max_ckpts_to_keep = 0" in str(info.value) and "a count >= 1" in str(info.value)
    with pytest.raises(UnsupportedSkyRLSettingError, match=r"trainer\.max_ckpts_to_keep"):
        check_supported(
            parse_cli([*REFERENCE, "trainer.arctic_rl.checkpoint.save_total_limit=3"]), steps_per_epoch=4
        )


def test_truncated_training_sampling_with_processed_logprobs_is_refused_at_dry_run():
    """top-k/top-p on the training rollouts: vLLM's processed_logprobs renormalise over the kept tokens, the
    trainer's do not, so IS weights built from them would sit below 1 at staleness 0. Where SkyRL builds
    such weights (here its token TIS) `python -m adapter_skyrl.main --dry-run` refuses it naming both
    fixes; raw_logprobs at temperature 1 (the trainer's distribution whatever is kept), truncation in
    evaluation sampling only, and a synchronous run that never reads the rollout log-probs all pass."""
    import io

    from adapter_skyrl.main import dry_run

    tis = (
        "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
        "generator.sampling_params.logprobs=1",
    )

    def run(*overrides: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        return dry_run([*REFERENCE, "trainer.logger=console", *overrides], out=out, err=err), err.getvalue()

    code, err = run("generator.sampling_params.top_p=0.9", "generator.sampling_params.top_k=20", *tis)
    assert code == 2, err
    assert "generator.sampling_params.top_p = 0.9: with generator.sampling_params.top_p=0.9 and " in err
    assert "generator.sampling_params.top_k=20 the sampler's processed_logprobs" in err
    assert "trainer.arctic_rl.vllm.logprobs_mode=raw_logprobs" in err and "biased below 1" in err
    code, err = run("generator.sampling_params.top_k=20", *tis)
    assert code == 2 and "generator.sampling_params.top_k = 20" in err, err
    code, err = run(
        "generator.sampling_params.top_k=20", "trainer.arctic_rl.vllm.logprobs_mode=raw_logprobs", *tis
    )
    assert code == 0, err
    code, err = run("generator.sampling_params.top_p=0.9", "generator.sampling_params.top_k=20")
    assert code == 0, err  # synchronous, old log-probs from the trainer's forward: never read
    code, err = run("generator.eval_sampling_params.top_p=0.7", "generator.eval_sampling_params.top_k=5")
    assert code == 0, err


# -- what SkyRL's example launchers set, translated instead of refused (issue 31) ------------------


def _arctic(*overrides: str):
    result = translate(
        parse_cli(["trainer.policy.model.path=Qwen/Qwen3-0.6B", *overrides]), steps_per_epoch=None
    )
    assert result.issues == [], [i.render() for i in result.issues]
    return result


@pytest.mark.parametrize("reduction", ["token_mean_legacy", "prompt_mean"])
def test_reductions_skyrl_applies_to_the_advantages_are_summed_on_the_server(reduction):
    """SkyRL scales the advantages for these itself (its own grouping of the rows): the server sums the
    policy term, which needs the core loss; KL / entropy keep the token mean."""
    loss = _arctic(f"trainer.algorithm.loss_reduction={reduction}").arctic.loss
    assert (loss.loss_agg_mode, loss.pg_loss_agg_mode, loss.loss_fn) == (
        "token-mean",
        "token-sum",
        "arctic_rl_core",
    )
    plain = _arctic("trainer.algorithm.loss_reduction=token_mean").arctic.loss
    assert (plain.loss_agg_mode, plain.pg_loss_agg_mode) == ("token-mean", None)


@pytest.mark.parametrize("reduction", ["token_mean_legacy", "prompt_mean"])
def test_the_trainer_keeps_skyrls_advantage_scaling_for_those_reductions(reduction):
    """The adapter's trainer skips SkyRL's loss-reduction scaling (the server aggregates) except for the
    reductions the server sums: there the advantages are exactly SkyRL's scaled ones."""
    import torch
    from adapter_skyrl.trainer import ArcticPPOTrainer
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.trainer import RayPPOTrainer

    cfg = parse_cli(
        [f"trainer.algorithm.loss_reduction={reduction}", "trainer.micro_train_batch_size_per_gpu=2"]
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)

    def batch() -> TrainingInputBatch:
        data = TrainingInputBatch({"advantages": torch.tensor([[1.0] * 4, [2.0] * 4, [-1.0] * 4, [0.5] * 4]) * mask,
                                   "response_mask": mask, "loss_mask": mask})  # fmt: skip
        data.metadata = {}
        return data

    trainer = ArcticPPOTrainer.__new__(ArcticPPOTrainer)
    trainer.cfg = cfg
    ours = ArcticPPOTrainer._normalize_advantages(trainer, batch(), [(0, 4)], [(0, 2), (2, 4)])["advantages"]
    skyrls = RayPPOTrainer._normalize_advantages(trainer, batch(), [(0, 4)], [(0, 2), (2, 4)])["advantages"]
    assert torch.equal(ours, skyrls) and not torch.equal(ours, batch()["advantages"])
    cfg.trainer.algorithm.loss_reduction = "token_mean"  # the server divides: the advantages go as they are
    assert torch.equal(ArcticPPOTrainer._normalize_advantages(trainer, batch(), [(0, 4)])["advantages"],
                       batch()["advantages"])  # fmt: skip


def test_a_warmup_in_steps_needs_no_data_and_an_hf_schedule_is_served():
    result = _arctic("trainer.policy.optimizer_config.num_warmup_steps=160", "trainer.hf_save_interval=10")
    assert (
        result.arctic.optimizer.warmup_steps == 160 and result.arctic.optimizer.total_training_steps is None
    )
    assert any(n.startswith("HF weights every 10 steps (trainer.hf_save_interval)") for n in result.notices)
    assert _arctic("trainer.hf_save_interval=0").notices == _arctic().notices  # SkyRL's 0: off


def test_engine_choices_reach_the_arctic_samplers_vllm():
    """Expert parallelism, language_model_only and engine_init_kwargs.max_model_len as SkyRL passes them
    to vLLM; a prefill/decode split's KV transfer does not apply (said aloud)."""
    result = _arctic(
        "generator.inference_engine.tensor_parallel_size=4", "generator.inference_engine.expert_parallel_size=4",
        "generator.inference_engine.language_model_only=true", "trainer.policy.language_model_only=true",
        "generator.inference_engine.engine_init_kwargs.max_model_len=4096",
        "generator.inference_engine.enable_pd=true", "generator.inference_engine.num_prefill=2",
        "generator.inference_engine.engine_init_kwargs.kv_transfer_config.kv_connector=NixlConnector",
        "generator.inference_engine.delta_weight_sync.sync_dir=/shared/sync",
    )  # fmt: skip
    vllm = result.arctic.vllm
    assert vllm.engine_args == {"language_model_only": True, "enable_expert_parallel": True}
    assert vllm.max_model_len == 4096
    assert any("engines prefill and decode together" in n for n in result.notices)
    assert any("loads AutoModelForCausalLM" in n for n in result.notices)
    assert {s.field for s in result.not_applied} >= {
        "generator.inference_engine.num_prefill",
        "generator.inference_engine.delta_weight_sync",
    }


def test_flash_attention_off_turns_our_default_zorro_off_with_the_reason():
    result = _arctic("trainer.flash_attn=false")
    assert result.arctic.zorro.enable is False and result.arctic.kernels.attn_implementation == "sdpa"
    assert any(n.startswith("ZoRRo off: trainer.flash_attn=false") for n in result.notices)
    explicit = translate(parse_cli(["trainer.flash_attn=false", "trainer.arctic_rl.zorro.enable=true",
                                    "trainer.policy.model.path=Qwen/Qwen3-0.6B"]), steps_per_epoch=None)  # fmt: skip
    assert explicit.issues  # asked for by name: the user's, refused with the reason


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        # multi-turn and step-wise rows are SkyRL's generator's (issue 29); merging the step rows is refused
        (["generator.max_turns=3", "generator.step_wise_trajectories=true", "generator.merge_stepwise_output=true"],
         "generator.merge_stepwise_output"),
        (["generator.inference_engine.external_proxy_url=http://p:8000",
          "generator.inference_engine.external_server_urls=['http://s:8001']",
          "generator.inference_engine.run_engines_locally=false"], "generator.inference_engine.external_proxy_url"),
        (["trainer.algorithm.advantage_estimator=gae", "trainer.critic.model.path=/critic"],
         "trainer.algorithm.advantage_estimator"),
        (["trainer.critic.model.path=/critic"], "trainer.critic.model.path"),
    ],
)  # fmt: skip
def test_what_arctic_cannot_do_is_refused_once_per_kind(overrides, path):
    result = translate(
        parse_cli(["trainer.policy.model.path=Qwen/Qwen3-0.6B", *overrides]), steps_per_epoch=None
    )
    assert [i.path for i in result.issues] == [path]

"""Every field of SkyRL 0.4.0's `SkyRLTrainConfig`, classified for the Arctic path: one table of rows,
with the cross-field rules and startup notices beside them (`arctic_rl_core.config.framework_fields`).

SkyRL's own fields are the source of truth for everything SkyRL has a field for: GPUs and nodes,
engines x TP, colocation, the vLLM engine knobs, attention, gradient checkpointing, offload,
sequence parallelism, token budgets, seeds, checkpoints, batch shape, optimizer, loss and KL. The
table drives the translation (`adapter_skyrl.config`), the startup report (settings that do not
apply, notices) and the tables of adapter-skyrl's README (`python -m adapter_skyrl.field_table --write
packages/adapter-skyrl/README.md`);
`tests/skyrl/test_skyrl_field_table.py` walks the installed dataclass tree and fails on any
unclassified leaf. The transforms, rule checks and notices are `adapter_skyrl.field_transforms`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from arctic_rl_core.config.framework_fields import (
    FieldTable,
    Notice,
    Reader,
    Rule,
    derived,
    mapped,
    not_applicable,
    passed_through,
    readme_command,
    rejected,
)
from arctic_rl_core.config.lora_fields import lora_rows

from adapter_skyrl import field_transforms as t
from adapter_skyrl.field_transforms import ALGO, CORTEX_LIMITS, CORTEX_RESUME, DS, FULLY_ASYNC
from adapter_skyrl.legacy_keys import LEGACY_KEYS
from adapter_skyrl.registries import REGISTER_FIX

FRAMEWORK = "SkyRL 0.4.0"
EXTENSION = "trainer.arctic_rl"

_CRITIC = "the Arctic backend trains the policy only (critic-free GRPO-family estimators)"
_FSDP = "the Arctic server trains with DeepSpeed (trainer.arctic_rl.deepspeed.*), not SkyRL's FSDP workers"
_MEGATRON = "the Arctic server trains with DeepSpeed; SkyRL's Megatron settings do not apply"
_REF = (
    "the Arctic log-prob job serves the policy's initial weights with the training job's DeepSpeed settings"
)
_ENGINE = "the Arctic server runs the vLLM engines; SkyRL starts none"
_LOGPROB_KERNELS = (
    "the Arctic server computes log-probs and entropy itself (trainer.arctic_rl.zorro.logits_*)"
)
_TRACKER = "SkyRL's tracker and logging"
_LORA = "trainer.policy.model.lora"
_TIS = "the adapter's rollout_is_weights on the wire (SkyRL's compute_tis_ratio; the server's loss multiplies by them)"
_OPC = (
    "SkyRL's off-policy correction, computed by the adapter with SkyRL's own compute_off_policy_correction "
    "(pi_old vs pi_rollout): TIS weights -> rollout_is_weights, sequence / outlier / token masks -> the loss "
    "mask sent on the wire"
)
_UNUSED_LOSS = "a parameter of a SkyRL policy loss the Arctic server does not compute"
_OWN_SERVERS = "generation on inference servers of your own: refused by a rule (the Arctic server samples)"
ENGINE = "generator.inference_engine"

ROWS = [
    # -- placement: GPUs, nodes, engines, colocation ---------------------------------------------
    mapped("trainer.placement.colocate_all", "placement.colocate", bool, "true = colocated Arctic jobs (sleep/wake)"),
    not_applicable("trainer.placement.colocate_policy_ref", "the Arctic server colocates every job when placement.colocate"),
    derived("placement.training_gpus", ("trainer.placement.policy_num_gpus_per_node", "trainer.placement.policy_num_nodes"),
            t.training_gpus, "policy_num_gpus_per_node x policy_num_nodes"),
    derived("placement.sampling_gpus", ("generator.inference_engine.num_engines", "generator.inference_engine.tensor_parallel_size"),
            t.sampling_gpus, "num_engines x tensor_parallel_size"),
    mapped("generator.inference_engine.tensor_parallel_size", "placement.sampling_tensor_parallel_size"),
    derived("placement.log_prob_gpus", ("trainer.placement.ref_num_gpus_per_node", "trainer.placement.ref_num_nodes",
            "trainer.algorithm.use_kl_loss", "trainer.algorithm.use_kl_in_reward"),
            t.log_prob_gpus, "ref_num_gpus_per_node x ref_num_nodes when a KL term needs reference log-probs, else 0"),
    not_applicable("trainer.placement.critic_num_nodes", _CRITIC),
    not_applicable("trainer.placement.critic_num_gpus_per_node", _CRITIC),
    mapped("trainer.policy.sequence_parallel_size", "placement.ulysses_sequence_parallel_size"),
    rejected("trainer.sequence_parallel_backend", "set trainer.sequence_parallel_backend=ulysses",
             why="the Arctic server's sequence parallelism is DeepSpeed Ulysses"),
    # -- model, kernels, precision ---------------------------------------------------------------
    mapped("trainer.policy.model.path", "model.name", t.model_name, "the model the Arctic server serves and trains"),
    # LoRA -> peft.* (training.peft on Cortex; on-prem kinds reject lora.rank > 0 at dry run, with the reason)
    *lora_rows(rank=f"{_LORA}.rank", alpha=f"{_LORA}.alpha", dropout=f"{_LORA}.dropout",
                  target_modules=f"{_LORA}.target_modules", exclude_modules=f"{_LORA}.exclude_modules"),
    rejected(f"{_LORA}.init_method", "leave trainer.policy.model.lora.init_method at kaiming",
             why="the Arctic server initialises its adapters itself (PEFT's default: Kaiming-uniform A, zero B); "
                 "training.peft carries no init method"),
    rejected(f"{_LORA}.max_loras", "leave it at 1", why="the Arctic sampler serves the one trained adapter"),
    rejected(f"{_LORA}.max_cpu_loras", "unset it (null)", why="the Arctic sampler serves the one trained adapter"),
    not_applicable(f"{_LORA}.lora_sync_path",
                  "the Arctic weight sync sends the adapter tensors itself (weight_format=lora): no files"),
    not_applicable(f"{_LORA}.sync_mode", "Megatron's adapter transport; the Arctic weight sync is the server's"),
    not_applicable(f"{_LORA}.share_expert_adapters", _MEGATRON),
    rejected("trainer.policy.model.fake_int4_qat.enabled", "set it to false",
             why="the Arctic server has no quantization-aware training"),
    not_applicable("trainer.policy.model.fake_int4_qat", "QAT settings apply only with fake_int4_qat.enabled"),
    derived("kernels.attn_implementation", ("trainer.flash_attn",), t.attn_implementation,
            "true = flash attention (FA2, or FA3 via trainer.arctic_rl.kernels.attn_implementation); false = sdpa"),
    mapped("trainer.gradient_checkpointing", "kernels.gradient_checkpointing"),
    not_applicable("trainer.gradient_checkpointing_use_reentrant", "DeepSpeed's activation checkpointing chooses its own mode"),
    mapped("trainer.bf16", "deepspeed.bf16"),
    mapped("trainer.policy.fsdp_config.cpu_offload", "deepspeed.offload_optimizer", bool,
           "FSDP CPU offload -> DeepSpeed optimizer offload (ZeRO >= 2); parameters: trainer.arctic_rl.deepspeed.offload_param"),
    not_applicable("trainer.policy.fsdp_config", _FSDP),
    rejected("trainer.strategy", "set trainer.strategy=fsdp (the ZeRO stage is trainer.arctic_rl.deepspeed.zero_stage)",
             why="the Arctic server trains with DeepSpeed ZeRO, FSDP's counterpart; Megatron's tensor / pipeline / "
                 "context / expert model parallelism has no counterpart there",
             accepts=t.is_fsdp),
    not_applicable("trainer.policy.megatron_config", _MEGATRON),
    rejected("trainer.policy.use_torch_compile", "set it to false", why="the Arctic server does not torch.compile training"),
    not_applicable("trainer.policy.record_memory", "memory snapshots are SkyRL worker features; the Arctic server has none"),
    rejected("trainer.policy.torch_profiler_config.enable", "set it to false; profile the Arctic server with its own tools",
             why="SkyRL's profiler runs in SkyRL's workers, which the Arctic path does not start"),
    not_applicable("trainer.policy.torch_profiler_config", "profiler settings apply only with torch_profiler_config.enable"),
    rejected("trainer.policy.model_config_kwargs", "remove it", why="the Arctic server builds the model from model.name as is"),
    passed_through("trainer.policy.language_model_only",
                   "true is what the Arctic training job does: it loads AutoModelForCausalLM, the language model of a "
                   "multimodal checkpoint only (said at startup)"),
    rejected("trainer.policy.inference_only_init", "set it to false", why="the Arctic path always trains"),
    not_applicable("trainer.use_expandable_segments", "the Arctic server sets its own CUDA allocator options"),
    # -- optimizer ---------------------------------------------------------------------------------
    mapped("trainer.policy.optimizer_config.lr", "optimizer.lr"),
    mapped("trainer.policy.optimizer_config.adam_betas", "optimizer.betas", tuple),
    mapped("trainer.policy.optimizer_config.weight_decay", "optimizer.weight_decay"),
    mapped("trainer.policy.optimizer_config.max_grad_norm", "optimizer.grad_clip"),
    mapped("trainer.policy.optimizer_config.scheduler", "optimizer.scheduler", t.scheduler,
           "constant_with_warmup -> constant, cosine -> cosine"),
    mapped("trainer.policy.optimizer_config.num_warmup_steps", "optimizer.warmup_steps", t.warmup_steps,
           "optimizer steps, as SkyRL counts them (no run length needed); 0 -> no warmup"),
    not_applicable("trainer.policy.optimizer_config.offload_after_step",
                  "the core weight-sync policy offloads the optimizer around each colocated sync"),
    derived("optimizer.total_training_steps", ("trainer.epochs", "trainer.max_training_steps"), t.total_steps,
            "steps per epoch x epochs, capped by max_training_steps (SkyRL's own count)"),
    # -- reference model and critic ----------------------------------------------------------------
    not_applicable("trainer.ref", _REF),
    not_applicable("trainer.critic", _CRITIC),
    not_applicable("trainer.critic.model.path", _CRITIC),
    not_applicable("trainer.critic_mini_batch_size", _CRITIC),
    # -- algorithm ---------------------------------------------------------------------------------
    passed_through("trainer.algorithm.advantage_estimator",
                   "SkyRL's trainer computes the advantages: any estimator in SkyRL's registry but a critic's "
                   "(checked at dry run: adapter_skyrl.registries)"),
    passed_through("trainer.algorithm.kl_ctrl", "SkyRL's KL-in-reward controller (use_kl_in_reward)"),
    mapped("trainer.algorithm.kl_estimator_type", "loss.kl_loss_type", t.kl_estimator),
    mapped("trainer.algorithm.use_kl_in_reward", "loss.use_kl_in_reward", bool,
           "SkyRL adds the KL penalty to rewards; the backend serves the reference log-probs"),
    mapped("trainer.algorithm.use_kl_loss", "loss.use_kl_loss", bool),
    mapped("trainer.algorithm.kl_loss_coef", "loss.kl_loss_coef"),
    derived("loss.entropy_coeff", ("trainer.algorithm.use_entropy_loss", "trainer.algorithm.entropy_loss_coef"),
            t.entropy_coeff, "entropy_loss_coef when use_entropy_loss, else 0"),
    derived("loss.temperature", ("trainer.algorithm.temperature", "generator.sampling_params.temperature"),
            t.loss_temperature, "algorithm.temperature, else the sampling temperature"),
    passed_through("trainer.algorithm.advantage_batch_normalize", "SkyRL's advantage normalisation"),
    not_applicable("trainer.algorithm.value_head_prefix", _CRITIC),
    mapped("trainer.algorithm.policy_loss_type", "loss.policy_loss", t.loss_family,
           "regular -> ppo_clip, dual_clip, gspo, sapo, cispo, clip_cov, kl_cov (computed on the server)"),
    derived("loss.loss_fn", ("trainer.algorithm.policy_loss_type",), t.loss_fn,
            "the server loss that computes the family on this backend (arctic_rl_core, or the built-in verl_grpo)"),
    mapped("trainer.algorithm.loss_reduction", "loss.loss_agg_mode", t.loss_agg_mode,
           "token_mean -> token-mean, sequence_mean -> seq-mean-token-mean, seq_mean_token_sum_norm -> "
           "seq-mean-token-sum-norm; token_mean_legacy, prompt_mean: SkyRL scales the advantages itself (its own "
           "grouping of the rows), the server sums the policy term (adapter_skyrl.loss_reductions)"),
    derived("loss.pg_loss_agg_mode", ("trainer.algorithm.loss_reduction",), t.pg_loss_agg_mode,
            "token-sum for token_mean_legacy and prompt_mean (the advantages carry SkyRL's reduction)"),
    passed_through("trainer.algorithm.grpo_norm_by_std", "SkyRL's GRPO advantages"),
    passed_through("trainer.algorithm.zero_variance_filter", "SkyRL's trainer"),
    # SkyRL's DAPO example config (DAPOConfig; here adapter_skyrl.dapo's ArcticDAPOConfig)
    passed_through("trainer.algorithm.overlong_buffer_len",
                  "DAPO's soft overlong punishment of the rewards (python -m adapter_skyrl.dapo, the counterpart of "
                  "SkyRL's DAPO example; arctic_rl_core.overlong)"),
    passed_through("trainer.algorithm.overlong_buffer_penalty_factor",
                  "DAPO's soft overlong punishment of the rewards (python -m adapter_skyrl.dapo)"),
    passed_through("trainer.algorithm.zero_variance_filter_tol", "SkyRL's trainer"),
    passed_through("trainer.algorithm.lambd", "SkyRL's advantage estimators"),
    passed_through("trainer.algorithm.gamma", "SkyRL's advantage estimators"),
    derived("loss.clip_ratio_low", ("trainer.algorithm.eps_clip_low", "trainer.algorithm.cispo.cispo_eps_clip_low"),
            t.clip_ratio_low, "eps_clip_low (cispo: cispo_eps_clip_low)"),
    derived("loss.clip_ratio_high", ("trainer.algorithm.eps_clip_high", "trainer.algorithm.cispo.cispo_eps_clip_high"),
            t.clip_ratio_high, "eps_clip_high (cispo: cispo_eps_clip_high)"),
    mapped("trainer.algorithm.clip_ratio_c", "loss.clip_ratio_c"),
    derived("loss.loss_scale_factor", ("trainer.algorithm.max_seq_len", "trainer.algorithm.loss_reduction"),
            t.loss_scale_factor, "max_seq_len with seq_mean_token_sum_norm"),
    passed_through("trainer.algorithm.off_policy_correction", _OPC),
    rejected("trainer.algorithm.enable_sample_support_replay", "set it to false",
             why="the Arctic backend does not capture sample support"),
    *(derived(core, (field,), t.only_with_loss(family, field), f"with policy_loss_type={family}")
      for core, field, family in (
        ("loss.tau_pos", "trainer.algorithm.sapo.tau_pos", "sapo"),
        ("loss.tau_neg", "trainer.algorithm.sapo.tau_neg", "sapo"),
        ("loss.clip_cov_ratio", "trainer.algorithm.clip_cov.clip_ratio", "clip_cov"),
        ("loss.clip_cov_lb", "trainer.algorithm.clip_cov.clip_cov_lb", "clip_cov"),
        ("loss.clip_cov_ub", "trainer.algorithm.clip_cov.clip_cov_ub", "clip_cov"),
        ("loss.kl_cov_ratio", "trainer.algorithm.kl_cov.kl_cov_frac", "kl_cov"),
        ("loss.ppo_kl_coef", "trainer.algorithm.kl_cov.ppo_kl_coef", "kl_cov"),
      )),
    passed_through("trainer.algorithm.cispo.cispo_anchor",
                  "the behaviour policy the adapter sends as old log-probs: old = the trainer's forward, "
                  "rollout = the sampler's log-probs (as SkyRL's cispo reads them)"),
    not_applicable("trainer.algorithm.dppo", _UNUSED_LOSS),
    not_applicable("trainer.algorithm.value_clip", _CRITIC),
    passed_through("trainer.algorithm.dynamic_sampling.type",
                  "SkyRL's synchronous trainer: filter drops zero-variance groups and generates the next dataloader "
                  "batch until train_batch_size groups are kept (DAPO), replace swaps them for copies of kept "
                  "groups (POLARIS); one step then spans several generate calls, all with the last sync's weights "
                  "(fully async: refused, see trainer.fully_async.sample_full_batch)"),
    passed_through("trainer.algorithm.dynamic_sampling.max_sample_batches",
                  "SkyRL's synchronous trainer: it stops the run after this many generate calls without a full "
                  "batch (-1 or 0: no limit)"),
    passed_through("trainer.algorithm.dynamic_sampling.min_replace_ratio",
                  "SkyRL's synchronous trainer (replace): it replaces only when more than this share of the "
                  "batch's groups has reward variance, else it generates the next batch"),
    rejected("trainer.mtp.enabled", "set it to false", why="the Arctic server trains no multi-token-prediction heads"),
    not_applicable("trainer.mtp", "applies only with trainer.mtp.enabled"),
    # -- SkyRL's fully asynchronous trainer (adapter_skyrl.fully_async) ----------------------------
    derived("async.max_staleness", ("trainer.fully_async.enabled", "trainer.fully_async.max_staleness_steps",
            "trainer.update_epochs_per_batch"), t.max_staleness,
            "fully_async.enabled (SkyRL's FullyAsyncRayPPOTrainer, the adapter's ArcticFullyAsyncPPOTrainer): "
            "max_staleness_steps x update_epochs_per_batch (SkyRL counts training steps, the core optimizer "
            "steps); else 0"),
    derived("async.is_weight_cap", ("trainer.algorithm.off_policy_correction.tis_ratio_type",
            "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high", "trainer.algorithm.use_tis",
            "trainer.algorithm.tis_imp_ratio_cap", "trainer.fully_async.enabled",
            "trainer.fully_async.max_staleness_steps"), t.is_weight_cap,
            "asynchronous with token TIS: token_tis_ratio_clip_high (use_tis: tis_imp_ratio_cap); SkyRL's own "
            "compute_tis_ratio computes the weights with it"),
    passed_through("trainer.fully_async.num_parallel_generation_workers",
                  "SkyRL's generation workers (each has one prompt group's generate request in flight)"),
    passed_through("trainer.fully_async.sample_full_batch", "SkyRL's fully async trainer (drops zero-variance groups)"),
    not_applicable("trainer.fully_async.clear_kv_cache_on_weight_sync",
                  "every Arctic weight sync resets the sampler's prefix cache (the core weight-sync policy, as "
                  "arctic-platform 0.1.4's sync_weights does): no KV cache outlives a weights version"),
    rejected("trainer.fully_async.simulate_training", "set it to false",
             why="the simulated trainer trains nothing; the Arctic path runs the real one"),
    not_applicable("trainer.fully_async.simulate_training_step_seconds", "applies only with simulate_training"),
    not_applicable("trainer.fully_async.simulate_weight_sync_seconds", "applies only with simulate_training"),
    # -- run, seeds, checkpoints -------------------------------------------------------------------
    mapped("trainer.seed", "determinism.seed"),
    passed_through("trainer.resume_mode", "SkyRL's checkpoint resume"),
    passed_through("trainer.resume_path", "SkyRL's checkpoint resume"),
    passed_through("trainer.log_path", "SkyRL's logs"),
    mapped("trainer.ckpt_path", "checkpoint.path", str, "the Arctic training job's checkpoint directory (and SkyRL's)"),
    mapped("trainer.max_ckpts_to_keep", "checkpoint.save_total_limit", t.keep_count,
           "the server keeps the newest N backend checkpoints (one folder per run, arctic_backend/checkpoint-<n>); "
           "SkyRL's own cleanup keeps as many global_step folders; -1 keeps all"),
    passed_through("trainer.ckpt_interval", "SkyRL's checkpoint schedule"),
    passed_through("trainer.hf_save_interval",
                   "SkyRL's HF export schedule (<= 0: off): each export is a backend checkpoint of the step with its "
                   "hf/ copy (save_checkpoint(export_hf=True)) in export_path/global_step_<n>/policy"),
    passed_through("trainer.export_path", "SkyRL's dumps and exports"),
    # -- batch shape -------------------------------------------------------------------------------
    mapped("trainer.update_epochs_per_batch", "batch.epochs"),
    mapped("trainer.train_batch_size", "batch.prompts_per_step"),
    mapped("trainer.policy_mini_batch_size", "batch.mini_batch_prompts"),
    derived("batch.micro_batch_size_per_gpu", ("trainer.micro_train_batch_size_per_gpu",), t.micro_batch,
            "as is without ZoRRo; with ZoRRo the micro-batch is whole prompt groups (the legacy integration's rule)"),
    not_applicable("trainer.micro_forward_batch_size_per_gpu", "the server's forward uses the training micro-batch"),
    mapped("trainer.max_tokens_per_microbatch", "batch.max_token_len_per_gpu", t.token_budget, "-1 -> the core's budget"),
    passed_through("trainer.recompute_old_logprobs_per_minibatch", "SkyRL's trainer (old log-prob forwards)"),
    rejected("trainer.update_ref_every_epoch", "set it to false", why="the backend's reference model is fixed for the run"),
    not_applicable("trainer.remove_microbatch_padding", "the server packs sequences itself (ZoRRo / unpadded)"),
    derived("batch.max_prompt_length", t.GENERATED_ROW_FIELDS, t.max_prompt_length,
            "trainer.max_prompt_length; step-wise multi-turn rows: generator.max_input_length (a step's prompt "
            "is the conversation so far)"),
    mapped("generator.n_samples_per_prompt", "batch.rollouts_per_prompt"),
    derived("batch.max_response_length", t.GENERATED_ROW_FIELDS, t.max_response_length,
            "max_generate_length (+1 where SkyRL's generator appends an EOS: after a stop string in chat turns, "
            "or closing a response that continued one message); multi-turn: max_input_length + max_generate_length "
            "(every turn and observation after the first prompt)"),
    # -- evaluation, logging, tokenizer (SkyRL's own) ---------------------------------------------
    passed_through("trainer.eval_batch_size", "SkyRL's evaluation"),
    passed_through("trainer.eval_before_train", "SkyRL's evaluation"),
    passed_through("trainer.eval_interval", "SkyRL's evaluation"),
    passed_through("generator.eval_n_samples_per_prompt", "SkyRL's evaluation"),
    passed_through("trainer.disable_fast_tokenizer", "the tokenizer the adapter loads"),
    *(passed_through(f"trainer.{name}", _TRACKER) for name in (
        "project_name", "run_name", "logger", "tags", "dump_data_batch", "dump_eval_results",
        "print_example_interval", "num_logger_eval_samples", "num_logger_train_samples", "log_example_interval",
    )),
    passed_through("trainer.enable_ray_gpu_monitor", "SkyRL's Ray GPU monitor"),
    not_applicable("trainer.logprobs_chunk_size", _LOGPROB_KERNELS),
    not_applicable("trainer.vocab_entropy_chunk_size", _LOGPROB_KERNELS),
    not_applicable("trainer.vocab_entropy_chunk_memory_mb", _LOGPROB_KERNELS),
    not_applicable("trainer.fused_lm_head_logprob", _LOGPROB_KERNELS),
    not_applicable("trainer.fused_lm_head_logprob_backend", _LOGPROB_KERNELS),
    # -- inference engines -> the Arctic server's vLLM -------------------------------------------
    mapped("generator.inference_engine.gpu_memory_utilization", "vllm.gpu_memory_utilization"),
    mapped("generator.inference_engine.max_num_seqs", "vllm.max_num_seqs"),
    mapped("generator.inference_engine.enable_prefix_caching", "vllm.enable_prefix_caching"),
    mapped("generator.inference_engine.enable_chunked_prefill", "vllm.enable_chunked_prefill"),
    mapped("generator.inference_engine.max_num_batched_tokens", "vllm.max_num_batched_tokens"),
    mapped("generator.inference_engine.enforce_eager", "vllm.enforce_eager"),
    derived("vllm.engine_args", (f"{ENGINE}.engine_init_kwargs", f"{ENGINE}.language_model_only",
            f"{ENGINE}.expert_parallel_size", f"{ENGINE}.enable_pd"), t.engine_args,
            "engine_init_kwargs (max_model_len -> vllm.max_model_len; with enable_pd its kv_transfer_config does not "
            "apply), plus language_model_only=true and enable_expert_parallel=true (expert_parallel_size > 1: vLLM's "
            "expert parallelism over the engine's tensor-parallel GPUs) as SkyRL passes them to vLLM"),
    derived("vllm.max_model_len", (f"{ENGINE}.engine_init_kwargs",), t.engine_max_model_len,
            "engine_init_kwargs.max_model_len"),
    rejected("generator.inference_engine.model_dtype", "set it to bfloat16", why="the Arctic server serves the model in bf16"),
    rejected("generator.inference_engine.fp8_weight_sync_mode", "unset it (null)", why="the Arctic weight sync is bf16"),
    not_applicable("generator.inference_engine.run_engines_locally", _ENGINE),
    rejected("generator.inference_engine.backend", "set it to vllm", why="the Arctic server's engines are vLLM"),
    not_applicable("generator.inference_engine.weight_sync_backend",
                  "the core weight-sync policy picks NCCL (separate GPUs) or CUDA IPC (trainer.arctic_rl.weight_sync.cuda_ipc)"),
    not_applicable("generator.inference_engine.weight_transfer_threshold_cuda_ipc_GB", "see weight_sync_backend"),
    not_applicable("generator.inference_engine.delta_weight_sync",
                   "SkyRL's delta weight sync (changed weights through shared storage) is a transport choice: the "
                   "Arctic server syncs the full weights itself (NCCL, or CUDA IPC when colocated)"),
    rejected("generator.inference_engine.pipeline_parallel_size", "set it to 1", why="Arctic engines are tensor-parallel only",
             accepts=t.is_one),
    rejected("generator.inference_engine.data_parallel_size", "set it to 1; more engines: num_engines",
             why="Arctic engines are tensor-parallel only", accepts=t.is_one),
    not_applicable("generator.inference_engine.vllm_v1_disable_multiproc", _ENGINE),
    rejected("generator.inference_engine.enable_return_routed_experts", "set it to false",
             why="the Arctic backend does not return routed experts"),
    rejected("generator.inference_engine.enable_return_sample_support_set", "set it to false",
             why="the Arctic backend does not capture sample support"),
    not_applicable("generator.inference_engine.fully_sharded_loras",
                  "the Arctic sampler's vLLM LoRA kernels are the server's (training.peft enables them)"),
    not_applicable("generator.inference_engine.enable_ray_prometheus_stats",
                  "there are no SkyRL vLLM engines to scrape (the adapter turns it off)"),
    not_applicable("generator.inference_engine.offload_kv_for_weight_sync",
                  "the core weight-sync policy wakes the KV cache after each colocated sync"),
    not_applicable("generator.inference_engine.use_expandable_segments", _ENGINE),
    not_applicable("generator.inference_engine.served_model_name", _ENGINE),
    not_applicable("generator.inference_engine.distributed_executor_backend", _ENGINE),
    rejected("generator.inference_engine.speculative_config", "unset it; use trainer.arctic_rl.arctic_inference.speculative_model",
             why="speculative decoding on the Arctic server is Arctic Inference's"),
    not_applicable("generator.inference_engine.external_proxy_url", _OWN_SERVERS),
    not_applicable("generator.inference_engine.external_server_urls", _OWN_SERVERS),
    not_applicable("generator.inference_engine.num_prefill", "applies only with enable_pd"),
    not_applicable("generator.inference_engine.prefill_init_kwargs", "applies only with enable_pd"),
    not_applicable("generator.inference_engine.decode_init_kwargs", "applies only with enable_pd"),
    not_applicable("generator.inference_engine.router_init_kwargs", _ENGINE),
    # -- generator: SkyRL's own SkyRLGymGenerator, sampling through the backend (adapter_skyrl.generator) --
    passed_through("generator.batched", "SkyRL's generator: true = one backend call per batch (SkyRL's single-turn "
                   "path); false = one request per trajectory turn, batched on the server by the core batcher"),
    passed_through("generator.max_turns", "SkyRL's generator (multi-turn agent loop; every environment gets it as "
                   "extras max_turns)"),
    passed_through("generator.max_input_length", "SkyRL's generator (the longest context a turn may start from)"),
    passed_through("generator.chat_template.source", "SkyRL's generator (with chat turns it re-tokenises the "
                   "history: SkyRL's mode without token-in / token-out, its rows unchecked)"),
    passed_through("generator.chat_template.name_or_path", "SkyRL's generator (see generator.chat_template.source)"),
    passed_through("generator.chat_template_kwargs", "SkyRL's generator (tokenizer.apply_chat_template)"),
    passed_through("generator.use_conversation_multi_turn", "SkyRL's generator (chat turns, or one continued message)"),
    passed_through("generator.append_eos_token_after_stop_str_in_multi_turn", "SkyRL's generator"),
    passed_through("generator.zero_reward_on_non_stop", "SkyRL's generator"),
    passed_through("generator.step_wise_trajectories", "SkyRL's generator and trainer (one row per turn, its "
                   "prompt the turn's context as the sampler read it)"),
    rejected("generator.merge_stepwise_output", "set it to false",
             why="SkyRL merges step rows into sequences after generation, which drops the per-row weights version "
                 "the Arctic staleness and freshness checks read"),
    *(passed_through(f"generator.{group}.{name}", "SkyRL's generator's sampling parameters (to the backend)")
      for group in ("sampling_params", "eval_sampling_params") for name in ("top_p", "top_k", "stop")),
    passed_through("generator.eval_sampling_params.temperature", "SkyRL's generator's sampling parameters (evaluation)"),
    passed_through("generator.eval_sampling_params.max_generate_length", "SkyRL's generator's sampling parameters (evaluation)"),
    *(x for group in ("sampling_params", "eval_sampling_params") for x in (
        rejected(f"generator.{group}.min_p", "set it to 0.0", why="the backend's sampling parameters have no min_p"),
        rejected(f"generator.{group}.repetition_penalty", "set it to 1.0",
                 why="the backend's sampling parameters have no repetition penalty"),
        rejected(f"generator.{group}.additional_kwargs", "remove it",
                 why="the backend's sampling parameters are max_tokens, temperature, top_p, top_k, stop, logprobs"),
        rejected(f"generator.{group}.logprobs", "use null, 0 or 1",
                 why="the backend returns the sampled token's log-prob only", accepts=t.is_null_0_or_1),
    )),
    not_applicable("generator.use_cache_salt", "the Arctic server keys its prefix cache itself"),
    passed_through("generator.apply_overlong_filtering",
                   "SkyRL's generator (DAPO's overlong filtering: a response whose stop reason is not `stop`, i.e. "
                   "truncated at max_generate_length, gets an all-zero loss mask)"),
    rejected("generator.vision_language_generator", "set it to false", why="the Arctic backends take text only"),
    # -- data and environments ---------------------------------------------------------------------
    passed_through("data", "SkyRL's dataloader"),
    passed_through("environment.env_class", "the skyrl-gym environment of rows without env_class"),
    passed_through("environment.skyrl_gym", "the skyrl-gym environments (env_config of each env_class)"),
    # -- the Arctic extension ----------------------------------------------------------------------
    passed_through(EXTENSION, "the core schema groups SkyRL has no field for (and the legacy integration's knobs)"),
    passed_through("trainer.arctic_trace_path", "the adapter's payload trace"),
]  # fmt: skip

RULES = [
    Rule("attention agrees with flash_attn",
         (f"{EXTENSION}.kernels.attn_implementation", "trainer.flash_attn"), t.attn_disagrees_with_flash_attn,
         "disagrees with SkyRL's trainer.flash_attn={flash_attn}",
         "set trainer.flash_attn={want}, or choose a matching attention implementation"),
    Rule("the reference model is the policy", ("trainer.ref.model.path", "trainer.policy.model.path"),
         t.ref_model_is_another,
         "the Arctic log-prob job serves the policy's initial weights ({policy!r}), not another model",
         "unset trainer.ref.model.path or set it to trainer.policy.model.path"),
    Rule("Cortex loads no checkpoint", ("trainer.resume_mode", f"{EXTENSION}.backend.kind"), t.cortex_resumes_from_path,
         CORTEX_RESUME, "set trainer.resume_mode=none (or latest on a fresh trainer.ckpt_path) for backend.kind=cortex"),
    Rule("rollout-anchored cispo takes no TIS",
         (f"{ALGO}.off_policy_correction.tis_ratio_type", f"{ALGO}.policy_loss_type", f"{ALGO}.cispo.cispo_anchor",
          f"{ALGO}.use_tis"), t.rollout_cispo_with_tis,
         "cispo with cispo_anchor=rollout is already the off-policy correction; TIS would count it twice (SkyRL's "
         "cispo raises)", "unset tis_ratio_type (and use_tis)"),
    # what SkyRL's FullyAsyncRayPPOTrainer asserts when it is built (after the backend is up), at dry run
    Rule("fully async is not colocated", ("trainer.placement.colocate_all", f"{FULLY_ASYNC}.enabled"), t.async_colocated,
         "SkyRL's fully asynchronous trainer overlaps generation with training; colocated Arctic jobs share the GPUs "
         "and take turns (the sampler sleeps while the trainer runs), so nothing can overlap (SkyRL itself refuses "
         "colocate_all with fully_async)",
         "set trainer.placement.colocate_all=false (separate training and sampling GPUs), or "
         "trainer.fully_async.enabled=false"),
    Rule("fully async trains one mini-batch a step",
         ("trainer.train_batch_size", "trainer.policy_mini_batch_size", f"{FULLY_ASYNC}.enabled"),
         t.async_batch_not_one_mini_batch,
         "SkyRL's fully async trainer trains one mini-batch per step (policy_mini_batch_size={mini})",
         "set trainer.train_batch_size={mini}"),
    Rule("fully async generation workers",
         (f"{FULLY_ASYNC}.num_parallel_generation_workers", "trainer.policy_mini_batch_size",
          f"{FULLY_ASYNC}.max_staleness_steps", f"{FULLY_ASYNC}.enabled"), t.async_workers_out_of_range,
         "SkyRL needs policy_mini_batch_size <= workers <= policy_mini_batch_size x (max_staleness_steps + 1) = "
         "{high} (fewer waste throughput, more can never all run)", "set it between {low} and {high}"),
    Rule("batched generation is single-turn", ("generator.batched", "generator.max_turns"), t.batched_multi_turn,
         "SkyRL's batched generation is single-turn: generator.max_turns={max_turns} would be ignored",
         "set generator.batched=false (one request per trajectory turn, batched on the server)"),
    Rule("fully async generates group by group", ("generator.batched", f"{FULLY_ASYNC}.enabled"),
         t.async_batched_generation, "SkyRL's fully async trainer generates one prompt group per request",
         "set generator.batched=false"),
    Rule("fully async takes no dynamic sampling", (f"{DS}.type", f"{FULLY_ASYNC}.enabled"), t.async_dynamic_sampling,
         "SkyRL's fully async trainer refuses dynamic sampling (it asserts type is null)",
         "unset it (null) and set trainer.fully_async.sample_full_batch=true with "
         "trainer.algorithm.zero_variance_filter=true (SkyRL's asynchronous equivalent of filter), or "
         "trainer.fully_async.enabled=false (SkyRL's synchronous trainer runs filter and replace)"),
    Rule("a full batch needs the zero-variance filter",
         (f"{FULLY_ASYNC}.sample_full_batch", f"{ALGO}.zero_variance_filter", f"{FULLY_ASYNC}.enabled"),
         t.async_full_batch_without_filter, "SkyRL drops zero-variance groups only with the zero-variance filter on",
         "set trainer.algorithm.zero_variance_filter=true"),
    Rule("fully async optimizes against the rollout",
         (f"{ALGO}.policy_loss_type", f"{ALGO}.cispo.cispo_anchor", f"{FULLY_ASYNC}.enabled"),
         t.async_loss_not_rollout_anchored,
         "SkyRL's fully async trainer keeps no stale policies to recompute old log-probs from: the loss must "
         "optimize against the rollout log-probs",
         "use rollout_is (SkyRL's fully async examples do), or cispo with trainer.algorithm.cispo.cispo_anchor=rollout"),
    # what SkyRL's trainer would raise on its first step (an unknown type) or never finish (replace that
    # can never replace)
    Rule("a dynamic sampling type SkyRL knows", (f"{DS}.type",), t.unknown_dynamic_sampling,
         "SkyRL's trainer knows filter (DAPO) and replace (POLARIS) and raises on anything else",
         "use filter, replace or null"),
    Rule("replace can replace", (f"{DS}.min_replace_ratio", f"{DS}.type"), t.replace_never_replaces,
         "SkyRL replaces only when MORE than this share of the batch's groups has reward variance: at 1 or more it "
         "never replaces and generates batch after batch until max_sample_batches stops the run",
         "set it in [0, 1) (SkyRL's default 0.3)"),
    # SkyRL's registries in this process: an example that registers its own in its main_<x>.py needs the
    # same registration before adapter_skyrl.main.main()
    Rule("a registered environment", ("environment.env_class",), t.unregistered_environment,
         "no skyrl-gym environment of that name is registered in this process (registered: {known}), so every "
         "rollout's reward would fail",
         REGISTER_FIX.replace("{register}", "skyrl_gym.envs.register(id={env_class!r}, entry_point=...)")
         + ", or use a registered environment"),
    Rule("a critic-free estimator", (f"{ALGO}.advantage_estimator",), t.critic_estimator,
         "needs a critic (a value model trained beside the policy); the Arctic backend trains the policy only",
         "use a critic-free estimator (trainer.algorithm.advantage_estimator=grpo, rloo, reinforce++ or maxrl, "
         "or a registered custom one) and unset trainer.critic.model.path"),
    Rule("a registered estimator", (f"{ALGO}.advantage_estimator",), t.unregistered_estimator,
         "not registered in SkyRL's AdvantageEstimatorRegistry in this process (registered: {known})",
         REGISTER_FIX.replace("{register}", "AdvantageEstimatorRegistry.register({name!r}, your_function)")
         + ", or use one of {free}"),
    Rule("a critic model", ("trainer.critic.model.path", f"{ALGO}.advantage_estimator"), t.critic_model,
         "a critic (value model) trained beside the policy; the Arctic backend trains the policy only",
         "unset trainer.critic.model.path"),
    Rule("the Arctic server samples", (f"{ENGINE}.external_proxy_url", f"{ENGINE}.external_server_urls"),
         t.own_inference_servers,
         "generation on inference servers of your own: the Arctic server samples with its own engines, which its "
         "weight sync updates",
         "unset generator.inference_engine.external_proxy_url and external_server_urls (the Arctic sampling job "
         "serves generation)"),
    Rule("Cortex exports no HF weights", ("trainer.hf_save_interval", f"{EXTENSION}.backend.kind"),
         t.cortex_hf_export, CORTEX_LIMITS["export_hf"], "set trainer.hf_save_interval=-1 for backend.kind=cortex"),
    Rule("a fixed KL coefficient with the KL loss", (f"{ALGO}.kl_ctrl.type", f"{ALGO}.use_kl_loss"),
         t.adaptive_kl_with_kl_loss, "with use_kl_loss=true the KL coefficient is fixed on the Arctic server",
         "use trainer.algorithm.kl_ctrl.type=fixed"),
]  # fmt: skip

# DAPO's reward and loss-mask shaping run in the adapter (not on the server); SkyRL's dynamic sampling
# runs in SkyRL's synchronous trainer: both said aloud at startup.
NOTICES = [
    Notice("the language model only", ("trainer.policy.language_model_only",
           f"{ENGINE}.language_model_only"), t.language_model_only),
    Notice("prefill and decode together", (f"{ENGINE}.enable_pd", f"{ENGINE}.engine_init_kwargs"),
           t.prefill_decode_together),
    Notice("HF export schedule", ("trainer.hf_save_interval", "trainer.export_path"), t.hf_export_schedule),
    Notice("DAPO overlong punishment", (f"{ALGO}.overlong_buffer_len", f"{ALGO}.overlong_buffer_penalty_factor",
           "generator.sampling_params.max_generate_length"), t.dapo_overlong_punishment),
    Notice("DAPO overlong filtering", ("generator.apply_overlong_filtering",), t.dapo_overlong_filtering),
    Notice("dynamic sampling: filter", (f"{DS}.type", f"{DS}.max_sample_batches", "generator.n_samples_per_prompt",
           "trainer.train_batch_size"), t.dynamic_sampling_filter),
    Notice("dynamic sampling: replace", (f"{DS}.type", f"{DS}.min_replace_ratio", f"{DS}.max_sample_batches",
           "generator.n_samples_per_prompt"), t.dynamic_sampling_replace),
    Notice("dynamic sampling: one sample", (f"{DS}.type", "generator.n_samples_per_prompt"),
           t.dynamic_sampling_one_sample),
    Notice("multi-turn through a text-only server", ("generator.max_turns", "generator.batched",
           "generator.use_conversation_multi_turn", "generator.chat_template.name_or_path", f"{EXTENSION}.backend.kind"),
           t.multi_turn_sampling),
    Notice("the search environment's retrieval server", ("environment.env_class", "environment.skyrl_gym"),
           t.search_retrieval_server),
    Notice("dynamic sampling: settings without effect",
           (f"{DS}.type", f"{DS}.max_sample_batches", f"{DS}.min_replace_ratio"), t.dynamic_sampling_unused),
]  # fmt: skip

TABLE = FieldTable(FRAMEWORK, ROWS, RULES, NOTICES)

# Core fields SkyRL owns that `trainer.arctic_rl` may still refine (SkyRL's field gives only a default).
REFINABLE = frozenset(
    {
        "kernels.attn_implementation",
        "batch.micro_batch_size_per_gpu",
        "batch.max_token_len_per_gpu",
        "deepspeed.offload_optimizer",
        "checkpoint.path",  # a server that writes its training job's files elsewhere
        "vllm.max_model_len",  # SkyRL has it only inside engine_init_kwargs
    }
)


def owned_core_fields() -> dict[str, str]:
    """Core field -> the SkyRL field(s) to set instead (an error under trainer.arctic_rl)."""
    return {core: " / ".join(TABLE.sources_of(core)) for core in sorted(TABLE.core_fields() - REFINABLE)}


def leaves(config: Any, prefix: str = "") -> Iterator[str]:
    """Dotted path of every leaf of a SkyRL config dataclass (mappings are leaves)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from leaves(value, path + ".")
        else:
            yield path


def reader(config: Any, extra: dict[str, Any] | None = None) -> Reader:
    """Reads dotted SkyRL fields (and `extra` pseudo fields) of `config`; a field the config does not
    have reads as None."""
    extra = dict(extra or {})

    def read(path: str) -> Any:
        if path in extra:
            return extra[path]
        node = config
        for part in path.split("."):
            if isinstance(node, Mapping):
                node = node.get(part)
            elif dataclasses.is_dataclass(node):
                node = getattr(node, part, None)  # e.g. the DAPO config's fields in another config
            else:
                return None
        return node

    return read


README_SECTIONS = {"skyrl-fields": TABLE.markdown, "skyrl-legacy-keys": LEGACY_KEYS.markdown}


if __name__ == "__main__":  # python -m adapter_skyrl.field_table [--write packages/adapter-skyrl/README.md]
    raise SystemExit(readme_command({name: make() for name, make in README_SECTIONS.items()}))

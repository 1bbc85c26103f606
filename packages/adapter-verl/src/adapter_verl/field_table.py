"""The verl mapping table: every leaf of verl 0.9.1's composed `ppo_trainer` config, classified, with
the cross-field rules and startup notices beside the rows (`arctic_rl_core.config.framework_fields`).

One row per verl field, or per subtree where a whole verl component has no meaning on the Arctic
path: mapped (the value drives the core field named, through its transform), rejected unless default
(any other value is a startup problem with its fix), not applicable (verl's own machinery the Arctic
path replaces: a value changed from verl's default is listed at startup, never silently dropped) or
passed through (verl itself keeps using it). The transforms, rule checks and notices are
`adapter_verl.field_transforms`.

`tests/verl/test_verl_field_table.py` composes the installed verl's default config and fails on any
leaf no row covers (and on any row naming no field), so a new verl release cannot add a silently
ignored field. verl's `_target_` leaves (the config class of each group) are structure, not settings:
`adapter_verl.config.check_supported` rejects any change to one. The verl tables of
adapter-verl's README are generated from it:
`python -m adapter_verl.field_table --write packages/adapter-verl/README.md`.
"""

from __future__ import annotations

from arctic_rl_core.config.framework_fields import (
    FieldTable,
    Notice,
    Rule,
    derived,
    mapped,
    not_applicable,
    passed_through,
    readme_command,
    rejected,
)
from arctic_rl_core.config.lora_fields import lora_rows

from adapter_verl import field_transforms as t
from adapter_verl.field_transforms import (
    CORE_PREFIX,
    CORTEX_RESUME,
    LOSS_MODE,
    OFF_POLICY_STRATEGY,
    OFF_POLICY_THRESHOLD,
    RC,
    REF,
    SYNC_STEP_FIELD,
    TRAINER_MODE_FIELD,
    VERL_POLICY_LOSSES,
    A,
    M,
    R,
)

FRAMEWORK = "verl 0.9.1"

# Core fields a verl field maps onto only when that verl field leaves its default: at verl's default
# the core's (backend) default applies and `remote_backend.core.<field>` may set it.
CORE_WHEN_VERL_DEFAULT: dict[str, str] = {
    "kernels.use_liger": f"{M}.use_liger",
    # verl computes no IS weights (rollout_correction.rollout_is null): the core's truncated ones apply,
    # with their cap from remote_backend.core.async.is_weight_cap
    "async.is_weight_cap": f"{RC}.rollout_is",
}

# verl fields a user adds with `+` (absent from verl's default config, so no leaf there)
OPTIONAL_FIELDS: tuple[str, ...] = (
    f"{M}.override_config.attn_implementation",
    # a field of verl's RolloutConfig class its YAML leaves out (verl's fully-async launchers add it)
    f"{R}.enable_sleep_mode",
)

FSDP_ENGINE = (
    "verl's FSDP engine setting: the Arctic training job is DeepSpeed (remote_backend.core.deepspeed.*)"
)
PROFILER = "verl's profiler profiles verl's own workers; the Arctic jobs run on the Arctic server"
MEGATRON_LORA = (
    "verl's Megatron-Bridge LoRA (model.lora.*) belongs to verl's Megatron engine; the Arctic LoRA "
    "adapters (training.peft) are set by actor_rollout_ref.model.lora_rank / lora_alpha / target_modules"
)
MEGATRON_LORA_FIX = "leave model.lora.rank at 0 and set those"
REF_WORKER = "verl's reference-policy FSDP worker: the reference model runs in the Arctic log-prob job"
LOGPROB_BATCHING = "the Arctic training job batches no-grad forwards by ppo_micro_batch_size_per_gpu"
DEAD_MULTI_TURN = (
    "verl 0.9.1's agent loops never read it: they build each turn's ids by Continuous Token (only verl's "
    "removed SGLang rollout did)"
)

ROWS = [
    # -- structure ---------------------------------------------------------------------------
    passed_through("remote_backend", "the adapter's own group (core settings verl has no field for)"),
    # -- data --------------------------------------------------------------------------------
    passed_through("data", "verl's dataset and dataloader"),
    mapped("data.train_batch_size", "batch.prompts_per_step", int),
    mapped("data.max_prompt_length", "batch.max_prompt_length", int),
    mapped("data.max_response_length", "batch.max_response_length", int),
    mapped("data.seed", "determinism.seed", t.int_or_unset, "also seeds verl's dataloader; null keeps the core default"),
    # verl's async trainers fetch prompts one at a time (they set 1 themselves; a sync step still
    # submits data.train_batch_size prompts at once)
    not_applicable("data.gen_batch_size", "verl's V1 trainer fetches prompts one at a time with DAPO's group filter "
        "(algorithm.filter_groups.enable) and in its asynchronous modes; other values need the filter (checked at dry run)"),
    rejected("data.use_shm", "set it to false"),
    rejected("data.custom_cls.path", "remove it", "the Arctic path reads verl's standard RL dataset"),
    rejected("data.return_multi_modal_inputs", "set it to true", "multi-modal inputs are not sent to the Arctic server"),
    # -- model -------------------------------------------------------------------------------
    passed_through(f"{M}.path", "verl's tokenizer; also model.name of the Arctic jobs (set by adapter_verl.config)"),
    rejected(f"{M}.hf_config_path", f"the Arctic server reads the model config from {M}.path"),
    rejected(f"{M}.tokenizer_path", f"the Arctic server tokenizes with {M}.path's tokenizer"),
    not_applicable(f"{M}.use_shm", "the Arctic server loads the model itself"),
    passed_through(f"{M}.trust_remote_code", "verl's and the adapter's tokenizers (Arctic backends refuse true)"),
    passed_through(f"{M}.custom_chat_template", "verl's dataset applies it to the prompts"),
    passed_through(f"{M}.external_lib", "verl imports it"),
    passed_through(f"{M}.override_config", "verl's own model config; the Arctic jobs (training, log-prob, sampler) load "
        "a model folder made at start-up in the run's folder (<trainer.default_local_dir>/arctic_model: the model's "
        "config.json with these overrides applied as verl applies them, every other file linked), named as their "
        "model.name; keys and types checked against the model's config.json (adapter_verl.model_overrides); Cortex and "
        "an HTTP server on another machine cannot read that folder (refused)"),
    mapped(f"{M}.override_config.attn_implementation", "kernels.attn_implementation", t.unset_if_none, "FA3 included"),
    mapped(f"{M}.enable_gradient_checkpointing", "kernels.gradient_checkpointing", bool),
    not_applicable(f"{M}.enable_activation_offload", "the Arctic training job recomputes activations (gradient checkpointing) "
        "instead of offloading them"),
    not_applicable(f"{M}.use_remove_padding", "the Arctic training job packs its own batches"),
    # LoRA -> peft.* (training.peft on Cortex; on-prem kinds reject lora_rank > 0 at dry run, with the reason)
    *lora_rows(
        rank=f"{M}.lora_rank",
        alpha=f"{M}.lora_alpha",
        target_modules=f"{M}.target_modules",
        exclude_modules=f"{M}.exclude_modules",
    ),
    rejected(f"{M}.lora_adapter_path", "remove it", "training.peft starts fresh adapters (arctic-platform 0.1.4 sends no adapter to load)"),
    rejected(f"{M}.lora.rank", MEGATRON_LORA_FIX, MEGATRON_LORA),
    rejected(f"{M}.lora.adapter_path", MEGATRON_LORA_FIX, MEGATRON_LORA),
    not_applicable(f"{M}.lora", "verl's Megatron LoRA settings (model.lora.*): apply only with model.lora.rank > 0"),
    derived("kernels.use_liger", (f"{M}.use_liger", f"{M}.use_fused_kernels"), t.use_liger, "either true = Liger's fused "
        "kernels on (verl's fused kernels' counterpart); verl's defaults (false) leave the backend's default (on with the "
        "Arctic backends; remote_backend.core.kernels.use_liger=false turns it off)"),
    not_applicable(f"{M}.fused_kernel_options", "verl's fused-kernel implementation options: the Arctic training job's fused "
        "kernels are Liger's"),
    rejected(f"{M}.tiled_mlp.enabled", "set it to false", "tiled MLP is not in the Arctic training job"),
    not_applicable(f"{M}.tiled_mlp.num_shards", "tiled MLP is off"),
    rejected(f"{M}.mtp.enable", "set it to false", "multi-token prediction is not in the Arctic training job"),
    not_applicable(f"{M}.mtp", "multi-token prediction is off"),
    mapped("actor_rollout_ref.hybrid_engine", "placement.colocate", bool, "hybrid engine = colocated Arctic jobs"),
    not_applicable("actor_rollout_ref.nccl_timeout", "NCCL of verl's workers; the Arctic server has its own"),
    # -- actor: optimizer --------------------------------------------------------------------
    rejected(f"{A}.optim.optimizer", "set it to AdamW", "the Arctic training job runs AdamW"),
    rejected(f"{A}.optim.optimizer_impl", "remove it", "the Arctic training job runs DeepSpeed's AdamW"),
    mapped(f"{A}.optim.lr", "optimizer.lr", float),
    derived("optimizer.warmup_ratio", (f"{A}.optim.lr_warmup_steps_ratio", f"{A}.optim.lr_warmup_steps"), t.warmup_ratio,
        "when lr_warmup_steps < 0 (verl's default -1); 0 leaves it unset"),
    passed_through(f"{A}.optim.total_training_steps", "verl fills it in from the dataloader"),
    mapped(f"{A}.optim.weight_decay", "optimizer.weight_decay", float),
    derived("optimizer.warmup_steps", (f"{A}.optim.lr_warmup_steps",), t.warmup_steps, "> 0: that many optimizer steps of "
        "linear warmup (verl prefers it to the ratio); 0: no warmup; < 0: lr_warmup_steps_ratio"),
    mapped(f"{A}.optim.betas", "optimizer.betas", t.floats),
    mapped(f"{A}.optim.clip_grad", "optimizer.grad_clip", t.grad_clip),
    derived("optimizer.min_lr_ratio", (f"{A}.optim.min_lr_ratio",), t.min_lr_ratio, "cosine schedule only"),
    rejected(f"{A}.optim.num_cycles", "remove it", "the Arctic cosine schedule is one half cycle"),
    derived("optimizer.scheduler", (f"{A}.optim.lr_scheduler_type", f"{A}.optim.warmup_style"), t.scheduler, "constant or cosine (warmup_style: verl's older name)"),
    rejected(f"{A}.optim.zero_indexed_step", "remove it", "the Arctic engine's scheduler counts its own steps"),
    rejected(f"{A}.optim.override_optimizer_config", "remove it", "the Arctic optimizer is configured by optim.* only"),
    # -- actor: engine -------------------------------------------------------------------------
    not_applicable(f"{A}.fsdp_config", FSDP_ENGINE),
    derived("deepspeed.offload_param", (f"{A}.fsdp_config.param_offload", f"{A}.fsdp_config.offload_policy"), t.offload_param,
        "param_offload or FSDP2's offload_policy: DeepSpeed parameter offload, on ZeRO-3 (the stage is fitted to it)"),
    derived("deepspeed.offload_optimizer", (f"{A}.fsdp_config.optimizer_offload", f"{A}.fsdp_config.offload_policy"),
        t.offload_optimizer, "optimizer_offload or offload_policy: DeepSpeed optimizer offload (ZeRO-2 or 3)"),
    mapped(f"{A}.fsdp_config.full_determinism", "determinism.full", bool),
    mapped(f"{A}.fsdp_config.dtype", "deepspeed.bf16", t.bf16_of_dtype, "bfloat16 = bf16 training, float32 = fp32"),
    rejected(f"{A}.fsdp_config.seed", "set that instead", "every Arctic job's seed is data.seed"),
    rejected(f"{A}.fsdp_config.qat.enable", "quantization-aware training is not in the Arctic training job"),
    rejected(f"{A}.qat.enable", "quantization-aware training is not in the Arctic training job"),
    not_applicable(f"{A}.qat", "QAT is off"),
    not_applicable(f"{A}.strategy", "verl's training engine: the Arctic training job is DeepSpeed"),
    not_applicable(f"{A}.use_torch_compile", FSDP_ENGINE),
    not_applicable(f"{A}.entropy_from_logits_with_chunking", "the Arctic counterpart is remote_backend.core.zorro.logits_optimization"),
    not_applicable(f"{A}.entropy_from_logits_chunk_size", "the Arctic counterpart is remote_backend.core.zorro.logits_peak_mem_gib"),
    not_applicable(f"{A}.entropy_checkpointing", "the Arctic counterpart is remote_backend.core.zorro.logits_optimization"),
    not_applicable(f"{A}.pad_to_length", "the Arctic training job packs its own batches"),
    not_applicable(f"{A}.use_remove_padding", "the Arctic training job packs its own batches"),
    not_applicable(f"{A}.use_fused_kernels", "follows actor_rollout_ref.model.use_fused_kernels"),
    rejected(f"{A}.freeze_vision_tower", "set it to false", "vision models are not trained on the Arctic path"),
    not_applicable(f"{A}.profiler", PROFILER),
    not_applicable(f"{R}.profiler", PROFILER),
    rejected(f"{R}.profiler.enable", "set it to false", PROFILER),
    rejected(f"{A}.profiler.enable", "set it to false", PROFILER),
    # -- actor: batch and loss -------------------------------------------------------------------
    passed_through(f"{A}.rollout_n", "follows actor_rollout_ref.rollout.n"),
    mapped(f"{A}.ppo_mini_batch_size", "batch.mini_batch_prompts", int),
    rejected(f"{A}.ppo_micro_batch_size", f"use {A}.ppo_micro_batch_size_per_gpu", "deprecated in verl"),
    derived("batch.micro_batch_size_per_gpu", (f"{A}.ppo_micro_batch_size_per_gpu", f"{A}.use_dynamic_bsz"), t.micro_batch_size,
        "use_dynamic_bsz=false: ppo_micro_batch_size_per_gpu rows; true: as many rows (whole ZoRRo groups) as the token budget "
        "holds at the longest lengths, a divisor of the rows each GPU trains per mini-batch (arctic_rl_core.config.engine_fit)"),
    derived("batch.max_token_len_per_gpu", (f"{A}.ppo_max_token_len_per_gpu", f"{A}.ulysses_sequence_parallel_size",
        f"{A}.fsdp_config.ulysses_sequence_parallel_size"), t.token_budget, "the ZoRRo packing, load-balancer and dynamic "
        "micro-batch budget; x the Ulysses degree (no SP on the Arctic path: a GPU holds what verl's SP group held)"),
    rejected(f"{A}.clip_ratio", f"set {A}.clip_ratio_low and {A}.clip_ratio_high"),
    mapped(f"{A}.clip_ratio_low", "loss.clip_ratio_low", float),
    mapped(f"{A}.clip_ratio_high", "loss.clip_ratio_high", float),
    mapped(f"{A}.clip_ratio_c", "loss.clip_ratio_c", float),
    derived("loss.policy_loss", (LOSS_MODE,), t.loss_family, f"family: {VERL_POLICY_LOSSES}"),
    derived("loss.loss_fn", (LOSS_MODE, f"{A}.loss_agg_mode"), t.loss_fn, "the server loss that runs the family on this backend (arctic_rl_core or the built-in verl_grpo)"),
    derived("loss.pg_loss_agg_mode", (LOSS_MODE,), t.pg_loss_agg_mode, "sapo: seq-mean-token-mean (as verl)"),
    derived("loss.tau_pos", (LOSS_MODE, f"{A}.tau_pos"), t.only_with_loss("sapo", f"{A}.tau_pos", 1.0), "sapo only"),
    derived("loss.tau_neg", (LOSS_MODE, f"{A}.tau_neg"), t.only_with_loss("sapo", f"{A}.tau_neg", 1.05), "sapo only"),
    derived("loss.clip_cov_ratio", (LOSS_MODE, f"{A}.policy_loss.clip_cov_ratio"), t.only_with_loss("clip_cov", f"{A}.policy_loss.clip_cov_ratio", 0.0002), "clip_cov only"),
    derived("loss.clip_cov_lb", (LOSS_MODE, f"{A}.policy_loss.clip_cov_lb"), t.only_with_loss("clip_cov", f"{A}.policy_loss.clip_cov_lb", 1.0), "clip_cov only"),
    derived("loss.clip_cov_ub", (LOSS_MODE, f"{A}.policy_loss.clip_cov_ub"), t.only_with_loss("clip_cov", f"{A}.policy_loss.clip_cov_ub", 5.0), "clip_cov only"),
    derived("loss.kl_cov_ratio", (LOSS_MODE, f"{A}.policy_loss.kl_cov_ratio"), t.only_with_loss("kl_cov", f"{A}.policy_loss.kl_cov_ratio", 0.0002), "kl_cov only"),
    derived("loss.ppo_kl_coef", (LOSS_MODE, f"{A}.policy_loss.ppo_kl_coef"), t.only_with_loss("kl_cov", f"{A}.policy_loss.ppo_kl_coef", 1.0), "kl_cov only"),
    rejected(f"{A}.policy_loss.dro_beta", "remove it", "the DRO loss is not computed by the Arctic server"),
    mapped(f"{A}.loss_agg_mode", "loss.loss_agg_mode", str),
    mapped(f"{A}.loss_scale_factor", "loss.loss_scale_factor", t.unset_if_none),
    mapped(f"{A}.entropy_coeff", "loss.entropy_coeff", float),
    rejected(f"{A}.calculate_entropy", "remove it", f"the Arctic path computes entropy when {A}.entropy_coeff != 0"),
    rejected(f"{A}.calculate_sum_pi_squared", "set it to false", "not computed by the Arctic training job"),
    mapped(f"{A}.use_kl_loss", "loss.use_kl_loss", bool),
    derived("placement.log_prob_gpus", (f"{A}.use_kl_loss", "algorithm.use_kl_in_reward"), t.log_prob_gpus, "use_kl_loss or use_kl_in_reward: as many as training (verl's reference shares the actor's GPUs); "
        "remote_backend.core.placement.log_prob_gpus overrides"),
    mapped(f"{A}.kl_loss_coef", "loss.kl_loss_coef", float),
    mapped(f"{A}.kl_loss_type", "loss.kl_loss_type", str),
    not_applicable(f"{A}.use_prefix_grouper", "verl's shared-prefix forward: the Arctic counterpart, ZoRRo (each prompt computed "
        "once per group), is on by default with the on-prem backends (fitted to the shapes, or off with a notice)"),
    mapped(f"{A}.ppo_epochs", "batch.epochs", int),
    passed_through(f"{A}.shuffle", "verl's mini-batch iterator in the forwarder's update_actor (seeded by data_loader_seed), over the "
        "step's rows in dataloader order (adapter_verl.batch_order): the same mini-batches in every run"),
    passed_through(f"{A}.data_loader_seed", f"the seed of verl's mini-batch shuffle (with {A}.shuffle=true)"),
    derived("checkpoint.export_hf", (f"{A}.checkpoint.save_contents",), t.export_hf, "'hf_model' in it: each backend "
        "checkpoint gets its Hugging Face copy (save_checkpoint(export_hf=True)); the Arctic backend saves model, optimizer "
        "and state whatever else it lists"),
    rejected(f"{A}.checkpoint.load_contents", "remove it", "the Arctic backend loads model, optimizer and state"),
    rejected(f"{A}.checkpoint.async_save", "set it to false", "Arctic checkpoints are synchronous"),
    not_applicable(f"{A}.checkpoint.strict", "verl's FSDP checkpoint loader"),
    rejected(f"{A}.grad_clip", f"use {A}.optim.clip_grad"),

    # -- reference policy --------------------------------------------------------------------
    not_applicable(f"{REF}", REF_WORKER),
    passed_through(f"{REF}.rollout_n", "follows actor_rollout_ref.rollout.n"),
    # -- rollout -------------------------------------------------------------------------------
    rejected(f"{R}.name", f"set {R}.name=arctic (vllm is accepted and means the Arctic server's vLLM)"),
    rejected(f"{R}.mode", "set it to async", "the arctic rollout serves verl's async agent loop"),
    derived("placement.sampling_gpus", (
            "actor_rollout_ref.hybrid_engine",
            "trainer.nnodes",
            "trainer.n_gpus_per_node",
            f"{R}.nnodes",
            f"{R}.n_gpus_per_node",
        ), t.sampling_gpus, "hybrid engine: the training GPUs; hybrid_engine=false: rollout.nnodes x rollout.n_gpus_per_node"),
    mapped(f"{R}.temperature", "loss.temperature", float, "also every rollout's sampling temperature"),
    passed_through(f"{R}.top_k", "per-request sampling parameter"),
    passed_through(f"{R}.top_p", "per-request sampling parameter"),
    passed_through(f"{R}.do_sample", "per-request sampling parameter"),
    rejected(f"{R}.full_determinism", "set it to false", "the 0.1.4 server has no deterministic-sampling switch"),
    rejected(f"{R}.seed", "set that instead", "every Arctic job's seed is data.seed"),
    passed_through(f"{R}.prompt_length", "follows data.max_prompt_length"),
    passed_through(f"{R}.response_length", "follows data.max_response_length; the default max tokens of a rollout"),
    rejected(f"{R}.dtype", "remove it", "the Arctic sampling job serves the model's dtype"),
    mapped(f"{R}.gpu_memory_utilization", "vllm.gpu_memory_utilization", float),
    rejected(f"{R}.ignore_eos", "set it to false"),
    mapped(f"{R}.enforce_eager", "vllm.enforce_eager", bool),

    not_applicable(f"{R}.free_cache_engine", "the Arctic server sleeps and wakes its engines when colocated"),
    mapped(f"{R}.tensor_model_parallel_size", "placement.sampling_tensor_parallel_size", int, "verl itself then runs TP 1 forwarders"),
    not_applicable(f"{R}.data_parallel_size", "the Arctic sampling job runs sampling GPUs / tensor_model_parallel_size "
        "independent vLLM engines: each is one of verl's data-parallel rollout ranks"),
    rejected(f"{R}.pipeline_model_parallel_size", "set it to 1", "the Arctic sampling job has no pipeline parallelism"),
    mapped(f"{R}.max_num_batched_tokens", "vllm.max_num_batched_tokens", t.int_or_unset),
    derived("vllm.max_model_len", (f"{R}.max_model_len", f"{R}.engine_kwargs.vllm"), t.max_model_len,
        "rollout.max_model_len, else engine_kwargs.vllm.max_model_len"),
    mapped(f"{R}.max_num_seqs", "vllm.max_num_seqs", int, "also the adapter's generate batch"),
    mapped(f"{R}.enable_chunked_prefill", "vllm.enable_chunked_prefill", bool),
    mapped(f"{R}.enable_prefix_caching", "vllm.enable_prefix_caching", bool),
    mapped(f"{R}.logprobs_mode", "vllm.logprobs_mode", str, "the sampling engine's vLLM logprobs_mode"),
    rejected(f"{R}.scheduling_policy", f"use {R}.engine_kwargs.vllm.scheduling_policy"),
    not_applicable(f"{R}.load_format", "the Arctic sampling job loads the model itself"),
    not_applicable(f"{R}.layered_summon", "FSDP weight gathering; the Arctic weight sync replaces it"),
    not_applicable(f"{R}.log_prob_micro_batch_size", LOGPROB_BATCHING),
    not_applicable(f"{R}.log_prob_micro_batch_size_per_gpu", LOGPROB_BATCHING),
    not_applicable(f"{R}.log_prob_use_dynamic_bsz", LOGPROB_BATCHING),
    not_applicable(f"{R}.log_prob_max_token_len_per_gpu", LOGPROB_BATCHING),
    not_applicable(f"{R}.disable_log_stats", "vLLM statistics of verl's own engines"),
    mapped(f"{R}.n", "batch.rollouts_per_prompt", int),
    rejected(f"{R}.over_sample_rate", "set it to 0"),
    not_applicable(f"{R}.multi_stage_wake_up", "the Arctic server wakes weights, then the KV cache"),
    derived("vllm.engine_args", (f"{R}.engine_kwargs.vllm", f"{R}.quantization", f"{R}.expert_parallel_size",
        f"{R}.cudagraph_capture_sizes"), t.engine_args, "engine_kwargs.vllm (less max_model_len), plus quantization; "
        "expert_parallel_size > 1: enable_expert_parallel (vLLM shards the experts over each engine's TP GPUs); "
        "cudagraph_capture_sizes: compilation_config.cudagraph_capture_sizes"),
    not_applicable(f"{R}.enable_sleep_mode", "the Arctic server sleeps and wakes its engines itself when colocated"),
    not_applicable(f"{R}.engine_kwargs.sglang", "the Arctic sampling job is vLLM"),
    not_applicable(f"{R}.engine_kwargs.trtllm", "the Arctic sampling job is vLLM"),
    passed_through(f"{R}.val_kwargs", "verl's validation sampling, served by the arctic rollout"),
    rejected(f"{R}.router_config_path", "remove it", "the arctic rollout routes to the Arctic server itself"),
    passed_through(f"{R}.multi_turn.enable", "verl's flag for multi-turn batches; the loop itself is agent.default_agent_loop or each row's agent_name"),
    passed_through(f"{R}.multi_turn.max_assistant_turns", "verl's tool_agent loop: the most assistant turns of a conversation; the adapter's bird_sql_agent: the episode's max_turns (required there)"),
    passed_through(f"{R}.multi_turn.max_user_turns", "verl's tool_agent loop: the most tool-response turns of a conversation"),
    passed_through(f"{R}.multi_turn.max_parallel_calls", "verl's tool_agent loop: tool calls executed per turn"),
    passed_through(f"{R}.multi_turn.max_tool_response_length", "verl's tool_agent loop: tool responses cut to it (characters)"),
    passed_through(f"{R}.multi_turn.tool_response_truncate_side", "verl's tool_agent loop: where a long tool response is cut"),
    passed_through(f"{R}.multi_turn.format", "verl's tool-call parser; the stop_token_ids it adds end a turn on the Arctic sampler"),
    passed_through(f"{R}.multi_turn.tool_config_path", "verl's tools (BaseTool classes), e.g. the adapter's GSM8K tool (adapter_verl/tool_configs/gsm8k_tool_config.yaml)"),
    passed_through(f"{R}.multi_turn.function_tool_path", "verl's function tools (@function_tool)"),
    rejected(f"{R}.multi_turn.use_inference_chat_template", "remove it", DEAD_MULTI_TURN),
    rejected(f"{R}.multi_turn.tokenization_sanity_check_mode", "remove it", DEAD_MULTI_TURN),
    rejected(f"{R}.multi_turn.num_repeat_rollouts", "remove it", "verl 0.9.1 never reads it"),
    passed_through(f"{R}.calculate_log_probs", "rollout log-probs come back with every generation"),
    passed_through(f"{R}.agent.num_workers", "verl's agent-loop workers"),
    passed_through(f"{R}.agent.default_agent_loop", "verl's agent loop for rows without agent_name: single_turn_agent and tool_agent sample each turn through the arctic rollout, as any loop that calls the server manager's generate"),
    passed_through(f"{R}.agent.agent_loop_config_path", "verl's registry of custom agent loops (they sample through the arctic rollout's generate)"),
    rejected(f"{R}.agent.custom_async_server.path", "remove it", "the arctic rollout is the server"),
    not_applicable(f"{R}.agent.custom_async_server.name", "see agent.custom_async_server.path"),
    not_applicable(f"{R}.checkpoint_engine", "weights reach the sampler by the Arctic weight sync (remote_backend.core.weight_sync)"),
    passed_through(f"{R}.trace", "verl's rollout tracing"),
    not_applicable(f"{R}.skip_tokenizer_init", "the Arctic sampling job takes text prompts"),
    rejected(f"{R}.enable_rollout_routing_replay", "set it to false"),
    not_applicable(f"{R}.moe_load_balance_metrics_interval", "metrics of verl's own engines"),
    not_applicable(f"{R}.prometheus", "Prometheus metrics of verl's own rollout servers: the Arctic server's engines "
        "are not verl's"),
    rejected(f"{R}.quantization_config_file", f"use {R}.engine_kwargs.vllm"),
    not_applicable(f"{R}.mtp", "follows actor_rollout_ref.model.mtp"),
    not_applicable(f"{R}.qat", "follows the actor's qat"),
    rejected(f"{R}.disaggregation.enabled", "set it to false", "prefill/decode disaggregation is not in the Arctic sampling job"),
    not_applicable(f"{R}.disaggregation", "disaggregation is off"),
    # -- algorithm -------------------------------------------------------------------------------
    passed_through("algorithm", "verl computes advantages"),
    not_applicable("algorithm.gamma", "GAE only (needs a critic)"),
    not_applicable("algorithm.lam", "GAE only (needs a critic)"),
    mapped("algorithm.use_kl_in_reward", "loss.use_kl_in_reward", bool, "verl subtracts the KL penalty from the rewards (apply_kl_penalty) with reference log-probs from the "
        "Arctic log-prob job; no KL term in the server loss"),
    passed_through("algorithm.kl_penalty", "verl's KL-in-reward estimator (apply_kl_penalty)"),
    passed_through("algorithm.kl_ctrl", "verl's KL-in-reward controller (apply_kl_penalty)"),
    passed_through("algorithm.rollout_correction", "verl computes the rollout importance-sampling weights (rollout_is*) and the rejection mask "
        "(rollout_rs*) from the rollout log-probs; the weights go on the wire as rollout_is_weights and the "
        "server loss multiplies them in, rejected tokens leave the response mask"),
    passed_through("algorithm.rollout_correction.bypass_mode", "verl's V1 trainer: true sets the old log-probs to the rollout's (no old-log-prob forward; the PPO ratio "
        "is against the sampling policy, and verl computes no rollout_is / rollout_rs then: refused with them); "
        "what lets separate_async run parameter_sync_step > 1 (no pi_old to keep); in either mode true needs "
        "rollout.calculate_log_probs=true (checked at dry run)"),
    not_applicable("algorithm.rollout_correction.loss_type", "verl's V1 trainer reads it only in its bypass_mode policy loss (actor.policy_loss.loss_mode=bypass_mode, "
        "which the Arctic path does not serve); with bypass_mode=true the policy loss is actor.policy_loss"),
    # -- trainer ---------------------------------------------------------------------------------
    passed_through("trainer", "verl's training loop, logging and validation schedule"),
    derived("placement.training_gpus", ("trainer.nnodes", "trainer.n_gpus_per_node"), t.training_gpus, "nnodes x n_gpus_per_node"),
    passed_through("trainer.total_training_steps", "verl's loop; also optimizer.total_training_steps (null: from the dataloader, set by the trainer)"),
    mapped("trainer.default_local_dir", "checkpoint.path", t.absolute_path, "made absolute; verl's own trainer state goes below it too"),
    rejected("trainer.default_hdfs_dir", "set it to null", "the Arctic backend saves to the filesystem only"),
    mapped("trainer.max_actor_ckpt_to_keep", "checkpoint.save_total_limit", t.keep_count, "the server keeps the newest N backend checkpoints (one folder per run, arctic_backend/checkpoint-<n>); "
        "null or <= 0 keeps all, as in verl"),
    not_applicable("trainer.max_critic_ckpt_to_keep", "no critic"),
    rejected("trainer.del_local_ckpt_after_load", "set it to false", "checkpoints belong to the Arctic backend"),
    rejected("trainer.checkpoint_callback_class", "remove it"),
    not_applicable("trainer.critic_warmup", "no critic"),
    rejected("trainer.device", "remove it", "verl's workers are CPU forwarders; GPUs belong to the Arctic server"),
    rejected("trainer.use_v1", "set trainer.use_v1=true (the V1 trainer)"),
    derived("async.max_staleness", (TRAINER_MODE_FIELD, OFF_POLICY_THRESHOLD, SYNC_STEP_FIELD, f"{A}.ppo_epochs"), t.max_staleness, "trainer_mode arctic (synchronous): 0; separate_async (the adapter's arctic_separate_async): "
        "(max_off_policy_threshold x parameter_sync_step - 1) x ppo_epochs optimizer steps (a trajectory spans "
        "at most threshold steps from its prompt's submission, each of parameter_sync_step updates of one "
        "mini-batch and one weight sync; null, unbounded, is rejected); parameter_sync_step > 1 needs "
        "algorithm.rollout_correction.bypass_mode=true (verl's decoupled mode keeps pi_old on the trainer, the "
        "Arctic training job has one copy of the weights; checked at dry run); colocate_async is rejected"),
    derived("async.stale_policy", (TRAINER_MODE_FIELD, OFF_POLICY_STRATEGY), t.stale_policy, "separate_async with staleness > 0: drop -> drop (verl's replay buffer drops the group); wait -> "
        "the core default (verl holds the step until stale groups in flight finish: none exceeds the bound)"),
    derived("async.is_weight_cap", (TRAINER_MODE_FIELD, f"{RC}.rollout_is", f"{RC}.rollout_is_threshold"), t.is_weight_cap, "separate_async with staleness > 0 and rollout_is=token: rollout_is_threshold (verl computes the "
        "weights); rollout_is null: the core's truncated IS weights, cap remote_backend.core.async.is_weight_cap "
        "(bypass_mode=true: none sent, the old log-probs are the rollout's and every weight would be 1)"),
    not_applicable("trainer.v1.colocate_async", "verl's colocate_async mode, rejected on the Arctic path (see trainer.v1.trainer_mode)"),
    passed_through("trainer.v1.separate_async.num_warmup_batches", "verl's separate-async prefetch window (batches submitted for generation ahead of training); "
        "unused by the synchronous arctic mode"),
    not_applicable("trainer.v1.separate_async.hybrid_rollout", "lends the hybrid engine's training GPUs to rollout between steps; separate_async on the Arctic "
        "path has no hybrid engine (actor_rollout_ref.hybrid_engine=false), and verl turns switching off then"),
    passed_through("trainer.v1.sync", "the arctic trainer mode is verl's synchronous trainer"),
    passed_through("trainer.v1.sampler", "verl's replay buffer"),
    passed_through("trainer.v1.sampler.sync_refill_failed_groups", "verl's replay buffer: in the synchronous arctic mode it refills groups whose rollouts failed (opt-in); "
        "separate_async refills every failed group whatever it says (verl's eviction matrix)"),
    passed_through("trainer.v1.sampler.custom_sampler", "verl's replay buffer class (path, name) and its sampler_kwargs: a custom buffer chooses what verl "
        "trains and in which order (verl's own buffer's completion order is restored to dataloader order), "
        "and in separate_async the forwarder still passes every row's weights version through the "
        "core's StalenessGate before training (a stale row is an error, never trained)"),
    passed_through("trainer.v1.sampler.sampler_kwargs", "the custom replay buffer's arguments (see trainer.v1.sampler.custom_sampler)"),
    not_applicable("trainer.ray_wait_register_center_timeout", "verl's worker start-up"),
    # -- the rest of verl ----------------------------------------------------------------------
    not_applicable("critic", "no critic on the Arctic path (GRPO-style estimators only)"),
    rejected("critic.enable", "set critic.enable=false", "no critic on the Arctic path", accepts=t.is_off),
    passed_through("reward", "verl's reward loop"),
    rejected("reward.reward_model.enable", "use reward.custom_reward_function", "model-based rewards are not served by the Arctic path"),
    not_applicable("reward.reward_model", "model-based reward is off"),
    passed_through("custom_reward_function", "verl's older name of reward.custom_reward_function"),
    not_applicable("reward_model", "verl's older name of reward.reward_model (off)"),
    passed_through("sandbox_fusion", "verl's older name of reward.sandbox_fusion"),
    rejected("distillation.enabled", "set it to false", "on-policy distillation is not on the Arctic path"),
    not_applicable("distillation", "distillation is off"),
    not_applicable("global_profiler", PROFILER),
    rejected("global_profiler.tool", "remove it", PROFILER),
    passed_through("ray_kwargs", "verl's Ray start-up"),
    passed_through("transfer_queue", "verl's TransferQueue"),
    passed_through("skip", "verl's rollout dump and replay"),
    not_applicable("model_engine", "verl's training engine family: the Arctic training job is DeepSpeed"),
]  # fmt: skip

RULES = [
    Rule("GRPO-style estimators", ("algorithm.adv_estimator",), t.gae_needs_a_critic,
         "GAE needs a critic, which the Arctic path has not", "set algorithm.adv_estimator=grpo"),
    Rule("a micro-batch size", (f"{A}.ppo_micro_batch_size_per_gpu",), t.no_micro_batch,
         "it fixes the backend's gradient-accumulation steps", "set it"),
    Rule("generation batches with DAPO's filter", ("data.gen_batch_size", "data.train_batch_size", "algorithm.filter_groups"),
         t.gen_batch_without_group_filter,
         "without DAPO's group filter verl's V1 trainer generates data.gen_batch_size prompts and trains "
         "data.train_batch_size of them: the rest wait in its replay buffer for a later step, sampled with older "
         "weights, which the synchronous Arctic mode (no staleness) does not train",
         "remove it (or set it to data.train_batch_size), or set algorithm.filter_groups.enable=true (DAPO's "
         "dynamic sampling, which fetches one prompt at a time)"),
    Rule("BIRD multi-turn's turn limit", (f"{R}.multi_turn.max_assistant_turns", f"{R}.agent.default_agent_loop"),
         t.bird_agent_without_turn_limit,
         "the adapter's bird_sql_agent loop needs the episode's turn limit",
         "set it to the N of `arctic-rl bird preprocess --max-turns N` (the turns the rows' prompt promises)"),
    Rule("standalone rollout GPUs", (f"{R}.nnodes", "actor_rollout_ref.hybrid_engine"),
         t.standalone_rollout_without_gpus,
         "with actor_rollout_ref.hybrid_engine=false the Arctic sampling job needs its own GPUs",
         f"set {R}.nnodes x {R}.n_gpus_per_node"),
    Rule("models transformers ships", (f"{M}.trust_remote_code", f"{CORE_PREFIX}.backend"),
         t.remote_code_off_reference,
         "arctic-platform 0.1.4's training job loads models without trust_remote_code",
         "use a model transformers ships (the reference backend honours it for the tokenizer)"),
    # what verl's separate-async trainer asserts after Ray is up, and what the Arctic path needs on top
    Rule("separate_async: no hybrid engine", ("actor_rollout_ref.hybrid_engine", TRAINER_MODE_FIELD),
         t.async_on_the_hybrid_engine,
         "verl's hybrid engine puts rollout replicas on the training GPUs (a colocated Arctic run: trainer and "
         "sampler take turns on the same GPUs, so generation cannot overlap training)",
         f"set actor_rollout_ref.hybrid_engine=false and give sampling its own GPUs ({R}.nnodes x "
         f"{R}.n_gpus_per_node)"),
    Rule("separate_async: one copy of the weights", (SYNC_STEP_FIELD, TRAINER_MODE_FIELD, f"{RC}.bypass_mode"),
         t.async_updates_without_bypass,
         "with more than one update per weight sync and algorithm.rollout_correction.bypass_mode=false verl "
         "recomputes old log-probs with pi_old saved on the trainer (Decoupled PPO: DetachActorWorker's "
         "save/restore of the weights to CPU around every forward after the first), and the Arctic training job "
         "keeps one copy of the weights (arctic-platform 0.1.4's only other copy is a checkpoint: a save and two "
         "loads per mini-batch)",
         "set algorithm.rollout_correction.bypass_mode=true (old log-probs = the rollout's, no pi_old), or set it "
         f"to 1 (and data.train_batch_size = {A}.ppo_mini_batch_size)"),
    Rule("separate_async: the batch is its updates",
         ("data.train_batch_size", SYNC_STEP_FIELD, f"{A}.ppo_mini_batch_size", TRAINER_MODE_FIELD),
         t.async_batch_not_sync_steps,
         f"verl's separate_async needs data.train_batch_size = {SYNC_STEP_FIELD} x {A}.ppo_mini_batch_size "
         "({sync_step} x {mini_batch})", "set data.train_batch_size={want}"),
    Rule("separate_async: a collective checkpoint engine", (f"{R}.checkpoint_engine.backend", TRAINER_MODE_FIELD),
         t.async_naive_checkpoint_engine,
         "verl's separate_async asserts a collective engine (its transfer to standalone replicas)",
         "set it to nccl (on the Arctic path the backend moves the weights between its own jobs either way)"),
    Rule("rollout log-probs for separate_async and bypass mode",
         (f"{R}.calculate_log_probs", TRAINER_MODE_FIELD, f"{RC}.bypass_mode"), t.rollout_logprobs_missing,
         "{why}", "set it to true"),
    # what verl itself would leave unused in bypass mode
    *(Rule(f"bypass mode computes no {name}", (f"{RC}.{name}", f"{RC}.bypass_mode"), check,
           "verl's V1 trainer computes no rollout correction in bypass mode (old log-probs = the rollout's: the PPO "
           "ratio already is against the sampling policy), so it would never apply",
           f"set it to null, or {RC}.bypass_mode=false")
      for name, check in (("rollout_is", t.bypass_with_rollout_is), ("rollout_rs", t.bypass_with_rollout_rs))),
    Rule("bypass mode sends no IS weights", (CORE_PREFIX, f"{RC}.bypass_mode"),
         t.bypass_with_is_weight_cap,
         f"{RC}.bypass_mode=true sends no IS weights (min(exp(old - rollout), cap) would be 1 for every token)",
         "remove it"),
    Rule("Cortex loads no checkpoint", ("trainer.resume_mode", f"{CORE_PREFIX}.backend"), t.cortex_resumes_from_path,
         CORTEX_RESUME,
         "set trainer.resume_mode=disable (or auto on a fresh trainer.default_local_dir) for backend.kind=cortex"),
]  # fmt: skip

NOTICES = [
    Notice("separate_async waits for stale groups", (OFF_POLICY_STRATEGY, TRAINER_MODE_FIELD),
           t.async_waits_for_stale_groups),
    Notice("a group of one has no baseline", (f"{R}.n", "algorithm.adv_estimator"), t.group_of_one),
    Notice("no Ulysses SP on the Arctic path",
           (f"{A}.ulysses_sequence_parallel_size", f"{A}.fsdp_config.ulysses_sequence_parallel_size"),
           t.sequence_parallel_off),
    Notice("activations recomputed, not offloaded", (f"{M}.enable_activation_offload",),
           t.activation_offload_as_recompute),
    Notice("KL in the reward and in the loss", ("algorithm.use_kl_in_reward", f"{A}.use_kl_loss"),
           t.kl_in_reward_and_loss),
]  # fmt: skip

VERL_FIELDS = FieldTable(FRAMEWORK, ROWS, RULES, NOTICES)


if __name__ == "__main__":  # python -m adapter_verl.field_table [--write packages/adapter-verl/README.md]
    raise SystemExit(readme_command({"verl-fields": VERL_FIELDS.markdown()}))

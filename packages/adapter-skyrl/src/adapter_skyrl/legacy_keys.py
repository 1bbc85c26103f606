"""Keys of the integrations this adapter replaces, each read with a notice naming the new key.

- `LEGACY_KEYS`: the flat knobs of SkyRL's own Arctic integration (`trainer.arctic_rl.<knob>` of
  SkyRL's `integrations/arctic_rl/config.py:ArcticRLTrainerConfig`), read as aliases of their core
  fields. Where SkyRL has its own field for the same setting (e.g. `optimizer_betas` vs
  `trainer.policy.optimizer_config.adam_betas`), the legacy value is used while SkyRL's field is at
  its default, and a conflict is an error naming both (see `adapter_skyrl.config`). Keys whose
  meaning changed are rejected naming the exact replacement. The table in adapter-skyrl's README is generated from it.
- `LEGACY_SKYRL_KEYS`: fields of the SkyRL release that integration ran on that SkyRL 0.4.0 no longer
  has (its launchers pass them): dropped before SkyRL's strict parse, each with a notice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arctic_rl_core.config.legacy_keys import Alias, LegacyKeys, Noted, Replaced

from adapter_skyrl.field_transforms import legacy_scheduler, logits_strategy, unset_if_none

LEGACY_KEYS = LegacyKeys(
    "trainer.arctic_rl",
    [
        Alias("colocate", "placement.colocate", bool,
              "SkyRL's trainer.placement.colocate_all=true now means the same; the legacy key wins when given"),
        Alias("use_zorro", "zorro.enable"),
        Alias("zero_stage", "deepspeed.zero_stage", int, "the legacy integration defaulted to 0, the core to 2"),
        Alias("log_prob_gpus", "placement.log_prob_gpus", int,
              "SkyRL's ref placement x KL settings give it; the legacy key wins while those are at their defaults"),
        Alias("offload_optimizer", "deepspeed.offload_optimizer", bool),
        Alias("use_liger", "kernels.use_liger", bool),
        Alias("attn_implementation", "kernels.attn_implementation"),
        Alias("enable_gradient_checkpointing", "kernels.gradient_checkpointing", bool,
              "SkyRL's trainer.gradient_checkpointing is the same setting"),
        Alias("ulysses_sequence_parallel_size", "placement.ulysses_sequence_parallel_size", int,
              "SkyRL's trainer.policy.sequence_parallel_size is the same setting"),
        Alias("logits_optimization", "zorro.logits_optimization", logits_strategy, "null -> none"),
        Alias("logits_optimization_peak_mem_size_in_gib", "zorro.logits_peak_mem_gib", float),
        Alias("logits_compute_from_fp32_inputs", "zorro.logits_compute_from_fp32_inputs", bool),
        Alias("logits_compute_in_fp32", "zorro.logits_compute_in_fp32", bool),
        Alias("determinism_full", "determinism.full", bool),
        Alias("determinism_seed", "determinism.seed", int, "SkyRL's trainer.seed is the same setting"),
        Alias("cuda_ipc_weight_sync", "weight_sync.cuda_ipc", bool),
        Alias("low_memory_weight_sync", "weight_sync.low_memory", bool),
        Alias("offload_param", "deepspeed.offload_param", bool),
        Alias("torch_autocast_enabled", "deepspeed.autocast", bool),
        Alias("torch_autocast_dtype", "deepspeed.autocast_dtype", unset_if_none),
        Alias("drop_position_ids", "wire.drop_position_ids", bool),
        Alias("lr_warmup_ratio", "optimizer.warmup_ratio", float,
              "SkyRL's trainer.policy.optimizer_config.num_warmup_steps is the same setting, in steps"),
        Alias("lr_scheduler_type", "optimizer.scheduler", legacy_scheduler,
              "SkyRL's trainer.policy.optimizer_config.scheduler is the same setting"),
        Alias("optimizer_betas", "optimizer.betas", tuple,
              "SkyRL's trainer.policy.optimizer_config.adam_betas is the same setting (the legacy integration ignored it)"),
        Alias("vllm_max_num_seqs", "vllm.max_num_seqs", int, "SkyRL's generator.inference_engine.max_num_seqs"),
        Alias("vllm_enforce_eager", "vllm.enforce_eager", bool, "SkyRL's generator.inference_engine.enforce_eager"),
        Alias("vllm_enable_chunked_prefill", "vllm.enable_chunked_prefill", bool,
              "SkyRL's generator.inference_engine.enable_chunked_prefill"),
        Alias("vllm_enable_prefix_caching", "vllm.enable_prefix_caching", bool,
              "SkyRL's generator.inference_engine.enable_prefix_caching"),
        Alias("vllm_max_model_len", "vllm.max_model_len", unset_if_none),
        Alias("vllm_max_num_batched_tokens", "vllm.max_num_batched_tokens", unset_if_none,
              "SkyRL's generator.inference_engine.max_num_batched_tokens"),
        Alias("use_arctic_inference", "arctic_inference.enable", bool,
              "FCA follows it (arctic_inference.fca, on by default)"),
        Alias("speculative_model", "arctic_inference.speculative_model", unset_if_none),
        Alias("num_speculative_tokens", "arctic_inference.num_speculative_tokens", int),
        Replaced("arctic_inference_config",
                 "use trainer.arctic_rl.arctic_inference.enable / fca / speculative_model",
                 "the raw Arctic Inference schema is now typed fields"),
        Alias("vllm_config", "vllm.engine_args", dict,
              "SkyRL's generator.inference_engine.engine_init_kwargs is the same setting; keys owned by typed "
              "knobs are rejected instead of silently winning"),
        Alias("host", "backend.host", str, "with trainer.arctic_rl.backend.kind=http"),
        Alias("port", "backend.port", int, "with trainer.arctic_rl.backend.kind=http"),
        Alias("startup_timeout", "backend.job_ready_timeout_s", float, "seconds until the server's jobs run"),
        Noted("server_logs", "the Arctic server's Ray actors already log to the driver (Ray's log_to_driver)",
              bool, "remove trainer.arctic_rl.server_logs (Ray forwards the server's logs anyway)"),
    ],
)  # fmt: skip


LEGACY_SKYRL_KEYS: Mapping[str, str] = {
    "generator.inference_engine.async_engine": "SkyRL 0.4.0 has no such field; the Arctic server's vLLM engines "
    "are asynchronous",
    "trainer.use_sample_packing": "SkyRL 0.4.0 has no such field; the Arctic server packs sequences itself "
    "(ZoRRo, unpadded)",
}


def split_dropped_keys(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(argv without the legacy SkyRL keys, one notice per dropped key)."""
    kept, notices = [], []
    for arg in argv:
        key = arg.lstrip("+").split("=", 1)[0]
        if key in LEGACY_SKYRL_KEYS:
            notices.append(f"{arg}: dropped; {LEGACY_SKYRL_KEYS[key]}")
        else:
            kept.append(arg)
    return kept, notices

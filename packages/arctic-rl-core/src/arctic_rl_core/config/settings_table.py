"""The settings table every adapter run starts with: backend, model, GPUs (train / sample /
log-prob), colocation, each optimisation on or off, and the framework settings that do not apply.

Plain text (it goes to logs and terminals alike); `settings_rows` gives the same content as data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.config.framework_fields import NotAppliedSetting
    from arctic_rl_core.config.run_config import ArcticRLConfig
from arctic_rl_core.config.deepspeed_config import log_prob_zero_stage

_BACKEND_WHERE = {
    "ray": "the Arctic server's jobs on the local Ray cluster",
    "http": "the Arctic on-prem HTTP server at {host}:{port}",
    "cortex": "Snowflake Cortex",
    "reference": "the CPU reference engine (a test double of the Arctic server: no GPU, tiny model)",
}


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def backend_line(cfg: ArcticRLConfig) -> str:
    kind = cfg.backend.kind
    where = _BACKEND_WHERE[kind].format(host=cfg.backend.host, port=cfg.backend.port)
    return f"{kind}: {where}"


def model_line(cfg: ArcticRLConfig) -> str:
    if cfg.backend.kind == "reference":
        ref = cfg.backend.reference
        if ref.model_path:
            return f"{ref.model_path} (local directory, reference engine)"
        return (
            f"tiny {ref.architecture} built from seed {cfg.determinism.seed} "
            f"({ref.num_layers} layers, hidden {ref.hidden_size}; reference engine)"
        )
    return str(cfg.model.name)


def optimisation_rows(cfg: ArcticRLConfig) -> list[tuple[str, str]]:
    """(name, state) of every Arctic optimisation; on the reference backend each says it does not run."""
    z, ai, k, v, w = cfg.zorro, cfg.arctic_inference, cfg.kernels, cfg.vllm, cfg.weight_sync
    shape = cfg.shape
    zorro = _on(z.enable)
    if z.enable:
        zorro += (
            f" (groups of {shape.zorro_max_rollouts}, micro-batch {cfg.batch.micro_batch_size_per_gpu} rows, "
            f"token budget {shape.max_token_len_per_gpu}/GPU)"
        )
    inference = _on(ai.enable)
    if ai.enable:
        spec = ai.speculative_model or ("suffix" if ai.suffix_decoding else None)
        inference += f" (FCA {_on(ai.fca)}, speculative decoding {spec or 'off'})"
    rows = [
        ("ZoRRo prompt de-duplication", zorro),
        ("ZoRRo load balancer", _on(z.load_balancer)),
        ("logits strategy", z.logits_optimization),
        ("Liger kernels", _on(k.use_liger)),
        ("attention", k.attn_implementation),
        ("gradient checkpointing", _on(k.gradient_checkpointing)),
        ("Arctic Inference", inference),
        ("vLLM prefix caching", _on(v.enable_prefix_caching)),
        ("vLLM CUDA graphs", _on(not v.enforce_eager)),
        ("weight sync", "CUDA IPC" + (" (low memory)" if w.low_memory else "") if w.cuda_ipc else "NCCL"),
        ("DeepSpeed", f"ZeRO-{cfg.deepspeed.zero_stage}, offload optimizer {_on(cfg.deepspeed.offload_optimizer)}, "
         f"params {_on(cfg.deepspeed.offload_param)}"),
        ("fp32 log-probs", _fp32_logits_line(cfg)),
        ("optimizer", _optimizer_line(cfg)),
    ]  # fmt: skip
    if cfg.placement.log_prob_gpus > 0:
        rows.append(("log-prob job", _log_prob_line(cfg)))
    if cfg.backend.kind == "reference":
        rows = [(name, f"{state} (no CPU meaning: not run by the reference engine)") for name, state in rows]
    return rows


def _fp32_logits_line(cfg: ArcticRLConfig) -> str:
    state = _on(bool(cfg.zorro.logits_compute_in_fp32))
    if "logits_compute_in_fp32" in cfg.zorro.model_fields_set:
        return f"{state} (zorro.logits_compute_in_fp32)"
    if cfg.kernels.attn_implementation == "flash_attention_2":
        return f"{state} (flash-attn's fused cross-entropy computes in fp32 itself)"
    return f"{state} (no flash-attn cross-entropy kernel with {cfg.kernels.attn_implementation}: bf16 log-probs are up to 0.07 nats off)"


def _optimizer_line(cfg: ArcticRLConfig) -> str:
    explicit = "torch_adam" in cfg.optimizer.model_fields_set
    if cfg.optimizer.torch_adam:
        why = (
            "optimizer.torch_adam"
            if explicit
            else "DeepSpeed's FusedAdam would JIT-compile with nvcc on the node"
        )
        return f"torch AdamW ({why})"
    if cfg.deepspeed.offload_optimizer:
        return "DeepSpeedCPUAdam (offloaded; a host C++ build on first use, no nvcc)"
    return "DeepSpeed FusedAdam (JIT-compiled on the node: needs nvcc matching torch's CUDA)"


def _log_prob_line(cfg: ArcticRLConfig) -> str:
    stage = log_prob_zero_stage(cfg)
    if stage == cfg.deepspeed.zero_stage:
        return f"ZeRO-{stage}, forward only (no optimizer)"
    return (
        f"ZeRO-{stage}, forward only (no optimizer): ZeRO-{cfg.deepspeed.zero_stage} shards optimizer state "
        "and gradients, which it has none of (DeepSpeed refuses ZeRO-1/2 without an optimizer)"
    )


def settings_rows(cfg: ArcticRLConfig) -> list[tuple[str, str]]:
    """(name, value) rows of the table, without the framework part."""
    place, shape = cfg.placement, cfg.shape
    tp = place.sampling_tensor_parallel_size
    rows = [
        ("backend", backend_line(cfg)),
        ("model", model_line(cfg)),
        (
            "GPUs",
            f"train {place.training_gpus} / sample {place.sampling_gpus} "
            f"({shape.num_sampling_engines} engine(s) x TP {tp}) / log-prob {place.log_prob_gpus}",
        ),
        ("colocation", "on (jobs share GPUs, sleep/wake)" if place.colocate else "off (separate GPUs)"),
        ("generation", generation_line(cfg)),
        (
            "batch",
            f"{cfg.batch.prompts_per_step} prompts x {cfg.batch.rollouts_per_prompt} rollouts; "
            f"optimizer step = {shape.train_batch_size} rows = micro {shape.micro_batch_size_per_gpu} x "
            f"grad-accum {shape.gradient_accumulation_steps} x data-parallel {shape.data_parallel_size}",
        ),
        ("training", training_line(cfg)),
        *optimisation_rows(cfg),
    ]
    return rows


def generation_line(cfg: ArcticRLConfig) -> str:
    """Synchronous, or asynchronous with its staleness bound (`async.*`)."""
    settings = cfg.async_settings
    if not settings.max_staleness:
        return "synchronous (generate, train, sync weights, in turn)"
    return (
        f"asynchronous: overlaps training; rollouts at most {settings.max_staleness} optimizer step(s) old "
        f"(older: {settings.stale_policy})"
    )


def training_line(cfg: ArcticRLConfig) -> str:
    """Full weights, or the LoRA adapters (`peft.*`) and their adapter-only weight sync."""
    peft = cfg.peft
    if not peft.enabled:
        return "full weights"
    modules = peft.target_modules if isinstance(peft.target_modules, str) else ", ".join(peft.target_modules)
    return (
        f"LoRA adapters (r {peft.lora_rank}, alpha {peft.lora_alpha:g}, on {modules}); base frozen, "
        "weight sync sends the adapters only"
    )


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def render_settings_table(
    cfg: ArcticRLConfig,
    *,
    framework: str,
    not_applied: Sequence[NotAppliedSetting] = (),
    notices: Sequence[str] = (),
) -> str:
    """The table, as text lines ending in a newline."""
    rows = settings_rows(cfg)
    width = max(len(name) for name, _ in rows)
    lines = [f"Arctic RL run settings ({framework})"]
    lines.extend(f"  {name.ljust(width)}  {value}" for name, value in rows)
    if not_applied:
        lines.append(f"  {framework} settings that do not apply on the Arctic path ({len(not_applied)}):")
        lines.extend(f"    {s.field} = {_shown(s.value)}: {s.reason}" for s in not_applied)
    else:
        lines.append(f"  {framework} settings that do not apply on the Arctic path: none set")
    for notice in notices:
        lines.append(f"  notice: {notice}")
    return "\n".join(lines) + "\n"

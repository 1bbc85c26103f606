"""The table every verl run starts with (and `--dry-run` prints): backend, model, GPUs per job,
colocation, the Arctic optimisations on or off, and the verl settings that do not apply."""

from __future__ import annotations

from typing import Any


def rows(result: Any) -> list[tuple[str, str]]:
    cfg = result.resolution.config
    place = cfg.placement
    shape = cfg.shape
    on = {True: "on", False: "off"}
    ai = cfg.arctic_inference
    rows_: list[tuple[str, str]] = [
        ("backend", cfg.backend.kind + (" (CPU reference engine)" if cfg.backend.kind == "reference" else "")),
        ("model", str(cfg.model.name or result.config.actor_rollout_ref.model.path)),
        (
            "GPUs",
            f"training {place.training_gpus} / sampling {place.sampling_gpus} "
            f"({shape.num_sampling_engines} vLLM engine(s) x TP {place.sampling_tensor_parallel_size}) / "
            f"log-prob {place.log_prob_gpus}",
        ),
        ("colocation", f"{on[place.colocate]} (actor_rollout_ref.hybrid_engine)"),
        (
            "batch",
            f"{cfg.batch.prompts_per_step} prompts x {cfg.batch.rollouts_per_prompt} rollouts; "
            f"optimizer step {shape.train_batch_size} rows = micro {shape.micro_batch_size_per_gpu} x "
            f"grad-accum {shape.gradient_accumulation_steps} x data-parallel {shape.data_parallel_size}",
        ),
        (
            "optimisations",
            f"ZoRRo {on[cfg.zorro.enable]}, Liger {on[cfg.kernels.use_liger]}, Arctic Inference {on[ai.enable]} "
            f"(FCA {on[ai.fca]}), logits {cfg.zorro.logits_optimization}, attention {cfg.kernels.attn_implementation}",
        ),
    ]
    not_applied = result.resolution.not_applicable
    if not_applied:
        rows_.append(("not applied", f"{len(not_applied)} verl setting(s) with no meaning on the Arctic path:"))
        rows_.extend(("", f"{path}={value!r}: {why}") for path, value, why in not_applied)
    return rows_


def render(result: Any) -> str:
    body = rows(result)
    width = max(len(name) for name, _ in body)
    lines = ["Arctic RL run (verl 0.9.1)"]
    lines.extend(f"  {name.ljust(width)}  {text}" for name, text in body)
    return "\n".join(lines) + "\n"

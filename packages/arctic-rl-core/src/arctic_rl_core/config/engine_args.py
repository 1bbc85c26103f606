"""vLLM engine arguments of the sampling job: typed defaults, then Arctic Inference injections,
then the user's free-form `vllm.engine_args` deep-merged on top (the user wins per leaf).

The result records which leaves were injected and which of those the user overrode, so nothing
the user wrote is silently replaced and nothing injected is silently lost.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from arctic_rl_core.config.schema import ArcticRLSettings
from arctic_rl_core.config.shape import TrainingShape


@dataclass(frozen=True)
class EngineArgs:
    """The merged engine arguments and where each leaf came from (dotted paths, sorted)."""

    args: dict[str, Any]
    from_typed_knobs: tuple[str, ...]
    injected: tuple[str, ...]
    from_user: tuple[str, ...]
    user_overrode: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine_args": copy.deepcopy(self.args),
            "from_typed_knobs": list(self.from_typed_knobs),
            "injected": list(self.injected),
            "from_user": list(self.from_user),
            "user_overrode": list(self.user_overrode),
        }


def leaf_paths(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted path of every non-mapping value (an empty mapping is a leaf)."""
    for key, value in mapping.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            yield from leaf_paths(value, path)
        else:
            yield path


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`override` merged into a copy of `base`, mapping by mapping; returns the merged dict and the
    leaf paths of `base` that `override` replaced."""
    merged = copy.deepcopy(dict(base))
    replaced: list[str] = []

    def merge(target: dict[str, Any], incoming: Mapping[str, Any], prefix: str) -> None:
        for key, value in incoming.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            current = target.get(key)
            if isinstance(current, dict) and isinstance(value, Mapping):
                merge(current, value, path)
                continue
            if key in target:
                if isinstance(current, Mapping) and current:
                    replaced.extend(leaf_paths(current, path))
                else:
                    replaced.append(path)
            target[key] = copy.deepcopy(value)

    merge(merged, override, "")
    return merged, sorted(replaced)


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = target
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def logprobs_mode(cfg: ArcticRLSettings) -> str:
    """vLLM's `logprobs_mode` of the sampling engines: `vllm.logprobs_mode`, else the distribution the
    trainer's log-probs have: temperature-scaled (`processed_logprobs`) where the training forward runs
    `apply_temperature`, the model's own (`raw_logprobs`) on Cortex, whose training body has no temperature."""
    if cfg.vllm.logprobs_mode is not None:
        return cfg.vllm.logprobs_mode
    return "raw_logprobs" if cfg.backend.kind == "cortex" else "processed_logprobs"


def typed_defaults(cfg: ArcticRLSettings) -> dict[str, Any]:
    vllm = cfg.vllm
    args: dict[str, Any] = {
        "tensor_parallel_size": cfg.placement.sampling_tensor_parallel_size,
        "gpu_memory_utilization": vllm.gpu_memory_utilization,
        "max_model_len": TrainingShape.from_config(cfg).max_model_len,
        "max_num_seqs": vllm.max_num_seqs,
        "enforce_eager": vllm.enforce_eager,
        "enable_chunked_prefill": vllm.enable_chunked_prefill,
        "enable_prefix_caching": vllm.enable_prefix_caching,
        "logprobs_mode": logprobs_mode(cfg),
    }
    if vllm.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = vllm.max_num_batched_tokens
    return args


def arctic_injections(cfg: ArcticRLSettings) -> dict[str, Any]:
    """Engine arguments implied by the Arctic Inference settings (empty when it is off)."""
    ai = cfg.arctic_inference
    injected: dict[str, Any] = {}
    if not ai.enable:
        return injected
    if ai.fca:
        # "{}" = arctic-inference's FCA defaults.
        injected["forest_cascade_attn_configs"] = "{}"
        # The server's own FCA default; restated because a compilation_config sent from here
        # (e.g. the workaround below) replaces the server's default as a whole.
        _set_path(injected, "compilation_config.cudagraph_mode", "PIECEWISE")
        if cfg.placement.num_sampling_engines > 1:
            # FCA turns on the fused all-reduce + RMSNorm pass, whose FlashInfer workspace fails
            # to initialise with several engines per node.
            _set_path(injected, "compilation_config.pass_config.fuse_allreduce_rms", False)
    if ai.speculative_model is not None:
        spec: dict[str, Any] = {
            "method": "arctic",
            "model": ai.speculative_model,
            "num_speculative_tokens": ai.num_speculative_tokens,
        }
        if ai.suffix_decoding:
            spec["enable_suffix_decoding"] = True
        injected["speculative_config"] = spec
    elif ai.suffix_decoding:
        injected["speculative_config"] = {
            "method": "suffix",
            "num_speculative_tokens": ai.num_speculative_tokens,
            "enable_suffix_decoding": True,
        }
    return injected


def build_engine_args(cfg: ArcticRLSettings) -> EngineArgs:
    defaults = typed_defaults(cfg)
    injected = arctic_injections(cfg)
    base, _ = deep_merge(defaults, injected)
    merged, replaced = deep_merge(base, cfg.vllm.engine_args)
    injected_paths = set(leaf_paths(injected))
    return EngineArgs(
        args=merged,
        from_typed_knobs=tuple(sorted(leaf_paths(defaults))),
        injected=tuple(sorted(injected_paths)),
        from_user=tuple(sorted(leaf_paths(cfg.vllm.engine_args))),
        user_overrode=tuple(path for path in replaced if path in injected_paths),
    )

"""`ConfigError`: every problem of a configuration at once, each with field path, value and fix.

Pydantic's own errors (unknown keys, wrong types, out-of-range values) are converted here, with
the closest valid name suggested for an unknown key; the cross-field rules of
`arctic_rl_core.config.validation` produce `ConfigIssue`s directly.
"""

from __future__ import annotations

import difflib
import json
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from pydantic import ValidationError


@dataclass(frozen=True)
class ConfigIssue:
    """One problem: the dotted field path, the offending value, what is wrong, how to fix it."""

    path: str
    value: Any
    problem: str
    remedy: str

    def render(self) -> str:
        shown = _show_value(self.value)
        where = f"{self.path} = {shown}" if self.path else shown
        return f"{where}: {self.problem}. Fix: {self.remedy}"


class ConfigError(ValueError):
    """A configuration that cannot be used; `issues` lists every problem found."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str | None = None) -> None:
        if not issues:
            raise ValueError("ConfigError needs at least one issue")
        self.issues: tuple[ConfigIssue, ...] = tuple(issues)
        self.source = source
        super().__init__(self._message())

    def _message(self) -> str:
        count = len(self.issues)
        where = f" in {self.source}" if self.source else ""
        head = f"{count} problem{'s' if count != 1 else ''} in the configuration{where}:"
        return "\n".join([head, *(f"  - {issue.render()}" for issue in self.issues)])

    def with_source(self, source: str) -> ConfigError:
        return ConfigError(self.issues, source=source)


_MISSING = object()


def _show_value(value: Any) -> str:
    """A value as the user wrote it in YAML/JSON terms (true, null, "text"), shortened."""
    if value is _MISSING:
        return "(missing)"
    # Encoded lazily and cut at the limit: a value with shared parts (YAML aliases) may expand to
    # gigabytes, a cyclic one forever.
    pieces: list[str] = []
    length = 0
    try:
        for piece in json.JSONEncoder().iterencode(value):
            pieces.append(piece)
            length += len(piece)
            if length > _SHOWN_CHARS:
                break
        text = "".join(pieces)
    except (TypeError, ValueError):
        text = reprlib.repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


_SHOWN_CHARS = 120


# ----------------------------------------------------------------------------------------------
# Field names known to the schema, for "did you mean" suggestions
# ----------------------------------------------------------------------------------------------


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic model classes inside a field annotation (through Optional / unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        found: list[type[BaseModel]] = []
        for arg in typing.get_args(annotation):
            found.extend(_model_classes(arg))
        return found
    return []


def schema_paths(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every group path of the schema ("" for the root) mapped to its model class."""
    found: dict[str, type[BaseModel]] = {"": root}
    pending: list[tuple[str, type[BaseModel]]] = [("", root)]
    while pending:
        prefix, model = pending.pop()
        for name, info in model.model_fields.items():
            for sub in _model_classes(info.annotation):
                path = f"{prefix}.{name}" if prefix else name
                found[path] = sub
                pending.append((path, sub))
    return found


def all_leaf_paths(root: type[BaseModel]) -> list[str]:
    """Dotted path of every field of the schema (groups and leaves)."""
    paths: list[str] = []
    for prefix, model in schema_paths(root).items():
        for name in model.model_fields:
            paths.append(f"{prefix}.{name}" if prefix else name)
    return sorted(paths)


# Names used by the legacy integrations (SkyRL `trainer.arctic_rl.*`, verl `remote_backend`, and the
# frameworks' own configs) mapped to where the knob lives here.
KNOWN_ALIASES: dict[str, str] = {
    "eps_clip_low": "loss.clip_ratio_low",
    "eps_clip_high": "loss.clip_ratio_high",
    "clip_ratio": "loss.clip_ratio_low and loss.clip_ratio_high",
    "use_zorro": "zorro.enable",
    "zorro_train": "zorro",
    "cuda_ipc_weight_sync": "weight_sync.cuda_ipc",
    "low_memory_weight_sync": "weight_sync.low_memory",
    "sampling_tp_size": "placement.sampling_tensor_parallel_size",
    "tensor_parallel_size": "placement.sampling_tensor_parallel_size",
    "use_arctic_inference": "arctic_inference.enable",
    "arctic_inference_config": "arctic_inference (typed fields: enable, fca, speculative_model)",
    "vllm_config": "vllm.engine_args",
    "lr_warmup_ratio": "optimizer.warmup_ratio",
    "lr_warmup_steps_ratio": "optimizer.warmup_ratio",
    "lr_scheduler_type": "optimizer.scheduler",
    "optimizer_betas": "optimizer.betas",
    "max_grad_norm": "optimizer.grad_clip",
    "clip_grad": "optimizer.grad_clip",
    "n_samples_per_prompt": "batch.rollouts_per_prompt",
    "rollout_n": "batch.rollouts_per_prompt",
    "train_batch_size": "batch.prompts_per_step",
    "ppo_mini_batch_size": "batch.mini_batch_prompts",
    "policy_mini_batch_size": "batch.mini_batch_prompts",
    "ppo_micro_batch_size_per_gpu": "batch.micro_batch_size_per_gpu",
    "ppo_epochs": "batch.epochs",
    "update_epochs_per_batch": "batch.epochs",
    "ppo_max_token_len_per_gpu": "batch.max_token_len_per_gpu",
    "max_generate_length": "batch.max_response_length",
    "enable_gradient_checkpointing": "kernels.gradient_checkpointing",
    "torch_autocast_enabled": "deepspeed.autocast",
    "determinism_full": "determinism.full",
    "determinism_seed": "determinism.seed",
    "ckpt_path": "checkpoint.path",
    "default_local_dir": "checkpoint.path",
    "comm_protocol": "backend.kind",
    "protocol": "backend.kind",
    "model_name": "model.name",
    "pat": "backend.cortex.token_env (the NAME of an environment variable holding the token)",
}


def suggest_key(root: type[BaseModel], group_path: str, key: str) -> str:
    """The remedy for an unknown key `key` inside the group at `group_path` of the core schema."""
    return suggest_key_among(all_leaf_paths(root), group_path, key, aliases=KNOWN_ALIASES)


def suggest_key_among(
    known: Sequence[str], group_path: str, key: str, *, aliases: Mapping[str, str] | None = None
) -> str:
    """The remedy for an unknown key `key` inside the group `group_path` of any config whose known
    dotted paths (groups and leaves) are `known` (the core schema's, or a framework's own: both
    adapters name misspelt framework keys with it). In order: a close name in the same group; a
    known alias; the same name in another group; a close leaf name anywhere; else the valid keys."""
    prefix = f"{group_path}." if group_path else ""
    here = sorted(
        {p[len(prefix) :].split(".", 1)[0] for p in known if p.startswith(prefix) and p != group_path}
    )
    close = difflib.get_close_matches(key, here, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{prefix}{close[0]}'? Remove or rename the key"
    if aliases and key in aliases:
        return f"this knob is '{aliases[key]}' here; move it there"
    elsewhere = [p for p in known if p.rsplit(".", 1)[-1] == key]
    if elsewhere:
        return f"'{key}' lives at {' or '.join(repr(p) for p in elsewhere)}; move it there"
    near = difflib.get_close_matches(key, sorted({p.rsplit(".", 1)[-1] for p in known}), n=1, cutoff=0.75)
    if near:
        matches = [p for p in known if p.rsplit(".", 1)[-1] == near[0]]
        return f"did you mean {' or '.join(repr(p) for p in matches)}? Remove or rename the key"
    valid = ", ".join(here) if here else "(none)"
    return f"remove it; valid keys here are: {valid}"


# ----------------------------------------------------------------------------------------------
# Pydantic errors -> ConfigIssues
# ----------------------------------------------------------------------------------------------

_TYPE_REMEDIES: dict[str, str] = {
    "int_type": "give a whole number",
    "int_parsing": "give a whole number",
    "int_from_float": "give a whole number (no fractional part)",
    "float_type": "give a number",
    "float_parsing": "give a number",
    "bool_type": "give true or false",
    "bool_parsing": "give true or false",
    "string_type": "give a string",
    "dict_type": "give a mapping (key: value pairs)",
    "model_type": "give a mapping of this group's keys",
    "model_attributes_type": "give a mapping of this group's keys",
    "tuple_type": "give a list",
    "list_type": "give a list",
    "missing": "add this key",
}

_PATH_REMEDIES: dict[str, str] = {
    "vllm.engine_args": (
        "give a mapping of vLLM engine argument names to values, e.g. {compilation_config: {cudagraph_mode: FULL}}"
    ),
    "deepspeed.config_overrides": (
        "give a mapping of DeepSpeed config keys to values, e.g. {zero_optimization: {reduce_bucket_size: 5e8}}"
    ),
}


def _description(root: type[BaseModel], path: str) -> str | None:
    if not path:
        return None
    group, _, leaf = path.rpartition(".")
    model = schema_paths(root).get(group)
    if model is None or leaf not in model.model_fields:
        return None
    return model.model_fields[leaf].description


def _loc_to_path(loc: Iterable[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _group_of(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Strip union-member tags pydantic inserts into `loc` (e.g. 'ReferenceModelConfig')."""
    groups = schema_paths(root)
    cleaned: list[Any] = []
    for part in loc:
        candidate = _loc_to_path([*cleaned, part])
        if isinstance(part, str) and part not in _all_field_names(groups) and candidate not in groups:
            # A union tag or function name, not a field.
            continue
        cleaned.append(part)
    return tuple(cleaned)


def _all_field_names(groups: dict[str, type[BaseModel]]) -> set[str]:
    names: set[str] = set()
    for model in groups.values():
        names.update(model.model_fields)
    return names


def issues_from_validation_error(root: type[BaseModel], error: ValidationError) -> list[ConfigIssue]:
    """One `ConfigIssue` per pydantic error; a `ConfigError` raised by a validator is unpacked."""
    issues: list[ConfigIssue] = []
    for item in error.errors(include_url=False):
        ctx = item.get("ctx") or {}
        inner = ctx.get("error")
        if isinstance(inner, ConfigError):
            issues.extend(inner.issues)
            continue
        loc = tuple(item.get("loc", ()))
        kind = item.get("type", "")
        value = item.get("input", _MISSING)
        if kind == "extra_forbidden":
            group_loc = _group_of(root, loc[:-1])
            group = _loc_to_path(group_loc)
            key = str(loc[-1]) if loc else "?"
            path = f"{group}.{key}" if group else key
            issues.append(ConfigIssue(path, value, "unknown key", suggest_key(root, group, key)))
            continue
        path = _loc_to_path(_group_of(root, loc))
        message = str(item.get("msg", "invalid value"))
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
            issues.append(ConfigIssue(path, value, message, "change the value as the message says"))
            continue
        remedy = _PATH_REMEDIES.get(path) or _TYPE_REMEDIES.get(kind)
        if kind == "literal_error" and "expected" in ctx:
            remedy = f"choose one of {ctx['expected']}"
        if remedy is None:
            remedy = f"use a value that satisfies: {message[0].lower() + message[1:]}"
        description = _description(root, path)
        if description:
            remedy = f"{remedy} ({path}: {description})"
        issues.append(ConfigIssue(path, value, message.rstrip("."), remedy))
    return issues

"""`ArcticRLConfig`: the configuration of an Arctic RL run as users and adapters hold it.

Both adapters map their framework's config into it; `plan()` and `to_client_config()` translate it
into what the Arctic stack receives. It is the schema's fields (`schema.ArcticRLSettings`), their
null knobs resolved to the backend's defaults and checked by the cross-field rules (`validation`), with
the views derived from them (`shape`, `plan()`, `to_client_config()`). Those modules read an
`ArcticRLSettings` and never import this one, so the config package has no import cycle. Build it with
`load_config` (YAML/TOML + overrides) or `ArcticRLConfig.from_dict`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError, model_validator

from arctic_rl_core.config.client_config import to_client_config
from arctic_rl_core.config.errors import ConfigError, issues_from_validation_error
from arctic_rl_core.config.input_bounds import bounded_issues
from arctic_rl_core.config.plan import build_plan
from arctic_rl_core.config.schema import ARCTIC_BACKENDS, ONPREM_BACKENDS, ArcticRLSettings
from arctic_rl_core.config.shape import TrainingShape
from arctic_rl_core.config.strict_types import coercion_issues
from arctic_rl_core.config.validation import check

if TYPE_CHECKING:
    from arctic_platform.client import ArcticClientConfig


class ArcticRLConfig(ArcticRLSettings):
    """One Arctic RL run. Build it with `load_config` (YAML/TOML + overrides) or `from_dict`."""

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ArcticRLConfig:
        _resolve_backend_defaults(self)
        issues = check(self)
        if issues:
            raise ConfigError(issues)
        return self

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None) -> ArcticRLConfig:
        """Validate plain data; every problem is raised at once as a `ConfigError`.

        Before the schema: the data's bounds (`input_bounds`: size, depth, cycles, non-finite
        numbers; nothing else is checked past one of those) and the coercions pydantic would make
        silently (`strict_types`: `true` or `"2"` for a number)."""
        bounded = bounded_issues(data)
        if bounded:
            raise ConfigError(bounded, source=source)
        coerced = coercion_issues(cls, data)
        if not coerced:
            return cls._validate_all(data, source)
        bad = {issue.path.split("[", 1)[0] for issue in coerced}
        try:
            cls._validate_all(_without_paths(data, bad), source)
        except ConfigError as error:
            coerced += [
                issue
                for issue in error.issues
                if not any(path in f"{issue.path} {issue.problem}" for path in bad)
            ]
        raise ConfigError(coerced, source=source) from None

    @classmethod
    def _validate_all(cls, data: dict[str, Any], source: str | None) -> ArcticRLConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            issues = issues_from_validation_error(cls, error)
            cross_field = any(
                isinstance((item.get("ctx") or {}).get("error"), ConfigError) for item in error.errors()
            )
        if cross_field:  # all fields were valid: the report is complete
            raise ConfigError(issues, source=source) from None
        # Field errors stop pydantic before the cross-field rules; run those rules once more on
        # the data without the bad fields, so one report still lists every problem.
        bad = {issue.path for issue in issues}
        try:
            cls.model_validate(_without_paths(data, bad))
        except ValidationError as error:
            issues += [
                issue
                for issue in issues_from_validation_error(cls, error)
                if not any(path in f"{issue.path} {issue.problem}" for path in bad)  # not about a bad field
            ]
        raise ConfigError(issues, source=source) from None

    @property
    def shape(self) -> TrainingShape:
        """Derived batch/parallelism numbers (batch identity, horizon, engines, lengths)."""
        return TrainingShape.from_config(self)

    def plan(self) -> dict[str, Any]:
        """What the Arctic stack receives, as plain data (no arctic-platform needed)."""
        return build_plan(self)

    def to_client_config(self) -> ArcticClientConfig:
        """The real `arctic_platform.client.ArcticClientConfig` (arctic-platform 0.1.4)."""
        return to_client_config(self)


def _without_paths(data: Any, paths: set[str]) -> Any:
    """A copy of nested `data` without the dotted `paths` (those that exist)."""
    if not isinstance(data, dict):
        return data
    copy: dict[str, Any] = {}
    for key, value in data.items():
        key_path = str(key)
        if key_path in paths:
            continue
        inner = {p[len(key_path) + 1 :] for p in paths if p.startswith(key_path + ".")}
        copy[key] = _without_paths(value, inner) if inner else value
    return copy


def _set_resolved(cfg: BaseModel, group: str, values: dict[str, Any]) -> None:
    """Fill null ("backend default") fields of a frozen group without marking them as set by the user."""
    settings = getattr(cfg, group).model_copy()
    for name, value in values.items():
        if getattr(settings, name) is None:
            object.__setattr__(settings, name, value)
    object.__setattr__(cfg, group, settings)


def _resolve_backend_defaults(cfg: ArcticRLSettings) -> None:
    """Null knobs take the backend's default: the legacy integrations' optimisations on the Arctic backends (ZoRRo
    with memory-lean logits and micro-batches of whole prompt groups, Liger, Arctic Inference with
    FCA), all off on the reference backend. Cortex takes Liger (its `model_provider`) but neither ZoRRo
    nor Arctic Inference: its forward-backward body and 0.1.4's create-job body have no place for them.
    An explicit value always wins."""
    arctic = cfg.backend.kind in ARCTIC_BACKENDS
    onprem = cfg.backend.kind in ONPREM_BACKENDS
    zorro_on = cfg.zorro.enable if cfg.zorro.enable is not None else onprem
    ai_on = cfg.arctic_inference.enable if cfg.arctic_inference.enable is not None else onprem
    group = cfg.zorro.max_rollouts or cfg.batch.rollouts_per_prompt
    _set_resolved(cfg, "zorro", {"enable": zorro_on, "logits_optimization": "memory" if zorro_on else "none"})
    _set_resolved(cfg, "kernels", {"use_liger": arctic})
    _set_resolved(cfg, "arctic_inference", {"enable": ai_on, "fca": ai_on})
    _set_resolved(cfg, "batch", {"micro_batch_size_per_gpu": group if zorro_on else 1})
    # fp32 log-probs unless flash-attn's fused cross-entropy (fp32 inside) runs; torch AdamW unless the
    # optimizer is offloaded (FusedAdam JIT-compiles with nvcc; the CPU Adam needs only a host compiler)
    fused_ce = cfg.kernels.attn_implementation == "flash_attention_2"
    _set_resolved(cfg, "zorro", {"logits_compute_in_fp32": onprem and not fused_ce})
    _set_resolved(cfg, "optimizer", {"torch_adam": onprem and not cfg.deepspeed.offload_optimizer})

"""The loss settings as the server-side loss reads them from a request's `meta`.

`meta.actor_config` carries what the built-in `verl_grpo` also reads (aggregation, clip ratios,
KL, entropy; same keys and defaults), `meta.policy_loss_config` the family and its parameters:
`{"loss_mode": <family>, "pg_loss_agg_mode": <mode or None>, <family knobs>}`. Unknown keys and bad
values are errors naming the key (a typo must not train with a default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from arctic_rl_losses.families import FamilyParams
from arctic_rl_losses.names import KL_LOSS_TYPES, LOSS_AGG_MODES, POLICY_LOSSES

ACTOR_CONFIG_KEYS = frozenset(
    {
        "loss_agg_mode",
        "clip_ratio",
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_c",
        "entropy_coeff",
        "use_kl_loss",
        "kl_loss_coef",
        "kl_loss_type",
        "loss_scale_factor",
    }
)
FAMILY_KNOBS: tuple[str, ...] = tuple(
    f.name for f in fields(FamilyParams) if not f.name.startswith("clip_ratio_")
)
POLICY_LOSS_CONFIG_KEYS = frozenset({"loss_mode", "pg_loss_agg_mode", *FAMILY_KNOBS})


@dataclass(frozen=True)
class LossSettings:
    family: str
    params: FamilyParams
    loss_agg_mode: str = "token-mean"
    pg_loss_agg_mode: str | None = None  # the policy term's mode when it differs (verl's sapo)
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_scale_factor: float | None = None

    @property
    def policy_agg_mode(self) -> str:
        return self.pg_loss_agg_mode or self.loss_agg_mode

    @classmethod
    def from_meta(cls, actor_config: Any, policy_loss_config: Any) -> LossSettings:
        actor = _mapping(actor_config, "actor_config")
        policy = _mapping(policy_loss_config, "policy_loss_config")
        for name, section, allowed in (
            ("actor_config", actor, ACTOR_CONFIG_KEYS),
            ("policy_loss_config", policy, POLICY_LOSS_CONFIG_KEYS),
        ):
            unknown = sorted(set(section) - allowed)
            if unknown:
                raise ValueError(
                    f"meta.{name} has keys {unknown} the arctic_rl_core loss does not read: allowed "
                    f"{sorted(allowed)}"
                )
        family = policy.get("loss_mode")
        if family not in POLICY_LOSSES:
            raise ValueError(
                f"meta.policy_loss_config.loss_mode={family!r}: the arctic_rl_core loss computes "
                f"{', '.join(POLICY_LOSSES)}"
            )
        clip = _number(actor, "actor_config", "clip_ratio", 0.2)
        knobs = {
            name: _number(policy, "policy_loss_config", name, getattr(FamilyParams, name))
            for name in FAMILY_KNOBS
        }
        params = FamilyParams(
            clip_ratio_low=_number(actor, "actor_config", "clip_ratio_low", clip),
            clip_ratio_high=_number(actor, "actor_config", "clip_ratio_high", clip),
            clip_ratio_c=_number(actor, "actor_config", "clip_ratio_c", 3.0),
            **knobs,
        )
        for name in ("clip_ratio_low", "clip_ratio_high"):
            if getattr(params, name) < 0:
                raise ValueError(f"meta.actor_config.{name}={getattr(params, name)}: must be >= 0")
        modes = {"loss_agg_mode": actor.get("loss_agg_mode", "token-mean")}
        modes["pg_loss_agg_mode"] = policy.get("pg_loss_agg_mode")
        for key, mode in modes.items():
            if mode is not None and mode not in LOSS_AGG_MODES:
                raise ValueError(f"{key}={mode!r}: use one of {', '.join(LOSS_AGG_MODES)}")
        kl_type = actor.get("kl_loss_type", "low_var_kl")
        if kl_type not in KL_LOSS_TYPES:
            raise ValueError(
                f"meta.actor_config.kl_loss_type={kl_type!r}: use one of {', '.join(KL_LOSS_TYPES)}"
            )
        scale = actor.get("loss_scale_factor")
        if scale is not None:
            scale = _number(actor, "actor_config", "loss_scale_factor", 1.0)
            if not scale > 0:
                raise ValueError(f"meta.actor_config.loss_scale_factor={scale}: must be > 0 or None")
        return cls(
            family=family,
            params=params,
            loss_agg_mode=str(modes["loss_agg_mode"]),
            pg_loss_agg_mode=modes["pg_loss_agg_mode"],
            entropy_coeff=_number(actor, "actor_config", "entropy_coeff", 0.0),
            use_kl_loss=_flag(actor, "use_kl_loss"),
            kl_loss_coef=_number(actor, "actor_config", "kl_loss_coef", 0.001),
            kl_loss_type=str(kl_type),
            loss_scale_factor=scale,
        )


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"meta.{name} is a {type(value).__name__}: send a dict")
    return dict(value)


def _number(section: Mapping[str, Any], name: str, key: str, default: float) -> float:
    value = section.get(key)
    if value is None:
        return float(default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"meta.{name}.{key}={value!r}: must be a finite number")
    return float(value)


def _flag(section: Mapping[str, Any], key: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"meta.actor_config.{key}={value!r}: must be true or false")
    return value

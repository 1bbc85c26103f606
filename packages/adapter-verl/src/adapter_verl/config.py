"""verl's composed config -> the adapter's settings and the core `ArcticRLConfig`.

verl's own fields are the source of truth for everything verl has a field for: the mapping table
(`adapter_verl.field_table.VERL_FIELDS`) classifies every leaf, maps GPU counts, colocation, TP,
vLLM engine settings, kernels, offload, batch, optimizer, loss, seed and the checkpoint folder, and
declares the cross-field rules of the Arctic path. The `remote_backend` Hydra group
(`adapter_verl/hydra_config/remote_backend/arctic.yaml`) carries only what verl has no field for:
`remote_backend.core` holds core schema groups (backend, zorro, arctic_inference, weight_sync, ...);
repeating a verl-owned setting there is an error naming the verl field. `resolve` checks everything
in one round: the structure of the config, the table's rules and rejections and the core
validation, every problem at once.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from arctic_rl_core.config import ArcticRLConfig, ConfigError, ConfigIssue
from arctic_rl_core.config.engine_fit import fit_engine_defaults, set_values
from arctic_rl_core.config.errors import suggest_key_among
from arctic_rl_core.config.framework_fields import Fields, NotAppliedSetting, Reader, Translation
from arctic_rl_core.config.model_type import model_type_of
from arctic_rl_core.config.truncated_sampling import truncated_sampling_issues
from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field

from adapter_verl.compose import default_config, default_leaves, leaves
from adapter_verl.field_table import CORE_WHEN_VERL_DEFAULT, VERL_FIELDS
from adapter_verl.field_transforms import CORE_PREFIX, LOSS_MODE, VERL_POLICY_LOSSES, A, M, R, is_bypass_mode
from adapter_verl.model_overrides import FIELD as OVERRIDE_FIELD
from adapter_verl.model_overrides import (
    FOLDER_NAME,
    DerivedModel,
    check_overrides,
    config_overrides,
    load_base_config,
    local_model_folder,
    server_sees_local_paths,
)

_ABSENT: Any = object()


class UnsupportedVerlSettingError(ValueError):
    """Settings the Arctic path cannot run: verl-side problems and core validation, all at once."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the verl settings for Arctic RL:\n{lines}")


class ArcticVerlSettings(BaseModel):
    """What the trainer resolves once and publishes to the workers and rollout servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    core: dict[str, Any] = Field(description="the full core ArcticRLConfig, as plain data")
    model_path: str = Field(description="actor_rollout_ref.model.path (tokenizer and HF config)")
    trust_remote_code: bool = Field(default=False, description="actor_rollout_ref.model.trust_remote_code")
    trace_dir: str | None = Field(default=None, description="remote_backend.trace_dir")
    old_logprobs_from_rollout: bool = Field(
        default=False,
        description="algorithm.rollout_correction.bypass_mode: the old log-probs are the rollout's (no IS weights)",
    )
    derived_model: dict[str, Any] | None = Field(
        default=None,
        description="model.override_config: the model folder the Arctic jobs load, made at start-up (DerivedModel)",
    )

    def arctic_config(self) -> ArcticRLConfig:
        return ArcticRLConfig.from_dict(self.core, source="verl config")


# ----------------------------------------------------------------------------------------------
# Reading a verl config
# ----------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def reader(config: Any) -> Reader:
    """Reads dotted verl fields of `config` as plain values (None where absent). Each field is
    resolved once per reader (OmegaConf parses an interpolation again on every select): a reader
    is for a config nobody changes while it is read."""
    resolved: dict[str, Any] = {}

    def read(path: str) -> Any:
        if path not in resolved:
            resolved[path] = _plain(OmegaConf.select(config, path, default=None))
        value = resolved[path]
        return copy.deepcopy(value) if isinstance(value, dict | list) else value

    return read


@lru_cache(maxsize=1)
def _default_config_reader() -> Reader:
    """The reader of verl's default config (composed once, never changed), shared by every check."""
    return reader(default_config())


_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?\s*([\w.]+)\s*(?:,.*)?\}$")


def _followed(path: str, default_raw: dict[str, Any]) -> str | None:
    """The field `path` follows by its default interpolation (`${a.b}`, `${oc.select:a.b,x}`,
    `${.sibling}`), itself or through an ancestor; None when it follows nothing."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        raw = default_raw.get(".".join(parts[:cut]))
        if isinstance(raw, str) and (match := _INTERPOLATION.match(raw)):
            target = match.group(1)
            if target.startswith("."):  # relative to the parent
                target = ".".join([*parts[: cut - 1], target.lstrip(".")])
            return ".".join([target, *parts[cut:]])
    return None


def _default_reader(config: DictConfig, read: Reader) -> Reader:
    """verl's default of each field of `config`: a field at its default interpolation (`${...}`)
    counts as at its default, also once verl has resolved the config (the trainer sees it
    resolved): its default is then what it follows."""
    user_raw = leaves(config)
    default_raw = default_leaves()
    read_default = _default_config_reader()

    def default(path: str) -> Any:
        if path in default_raw and default_raw[path] == user_raw.get(path, _ABSENT):
            return read(path)
        followed = _followed(path, default_raw)
        if followed is not None:
            return read(followed)
        return read_default(path) if path in default_raw else _ABSENT

    return default


def translate_fields(config: DictConfig) -> Translation:
    """The mapping table over `config`: core values, the rows' and the rules' problems, the settings
    not applied and the startup notices."""
    fields = [path for path in leaves(config) if not path.endswith("._target_")]
    read = reader(config)
    return VERL_FIELDS.translate(read, _default_reader(config, read), fields)


def render_rule_issue(issue: ConfigIssue) -> str:
    """A rule's problem as 'field=value: problem: fix' (the verl adapter's spelling of its own checks)."""
    return f"{issue.path}={issue.value!r}: {issue.problem}: {issue.remedy}"


# ----------------------------------------------------------------------------------------------
# The structure of a verl config: its groups' classes, fields the table knows, remote_backend.core
# ----------------------------------------------------------------------------------------------


def _structure_problems(config: DictConfig) -> list[str]:
    """A changed `_target_` (verl's config class of a group) and fields no row classifies."""
    problems = []
    defaults = default_leaves()
    for path, value in leaves(config).items():
        if path.endswith("._target_"):
            if path in defaults and defaults[path] != value:
                problems.append(f"{path}={value!r}: verl's config class for this group: remove the override")
        elif not VERL_FIELDS.rows_for(path):
            group, _, name = path.rpartition(".")
            known = sorted({k for k in defaults if not k.endswith("._target_")} | _groups(defaults))
            problems.append(
                f"{path}={value!r}: a field neither verl 0.9.1's config nor the verl mapping table knows. Fix: "
                f"{suggest_key_among(known, group, name)}"
            )
    return problems


def _groups(paths: Any) -> set[str]:
    return {p.rsplit(".", i)[0] for p in paths for i in range(1, p.count(".") + 1)}


def _core_group_problems(config: DictConfig) -> list[str]:
    """`remote_backend.core` must be core groups, and may not repeat what verl owns."""
    core = reader(config)(CORE_PREFIX) or {}
    if not isinstance(core, dict):
        return [f"{CORE_PREFIX}={core!r}: must be a mapping of core schema groups"]
    problems = []
    read = reader(config)
    for core_path in sorted(VERL_FIELDS.core_fields()):
        group, _, key = core_path.partition(".")
        values = core.get(group)
        if isinstance(values, dict) and key in values:
            if core_path == "placement.log_prob_gpus":
                continue  # verl has no field for it: the derived value is a default
            verl_field = CORE_WHEN_VERL_DEFAULT.get(core_path)
            if verl_field is not None and not read(verl_field):
                continue  # verl's field at its default leaves the core field to remote_backend.core
            problems.append(
                f"{CORE_PREFIX}.{core_path}={values[key]!r}: verl owns it: set "
                f"{' / '.join(VERL_FIELDS.sources_of(core_path))} instead"
            )
    model_name = (core.get("model") or {}).get("name") if isinstance(core.get("model"), dict) else None
    if model_name is not None:
        problems.append(
            f"{CORE_PREFIX}.model.name={model_name!r}: verl owns it: set actor_rollout_ref.model.path instead"
        )
    return problems


def check_supported(config: DictConfig) -> list[str]:
    """verl settings the Arctic path cannot honour beyond the table's rejections, as
    'field=value: remedy': the config's structure and the table's rules (the rows' own problems come
    from `translate_fields`)."""
    read = reader(config)
    rules = VERL_FIELDS.check_rules(Fields(read, _default_reader(config, read)))
    return [*_structure_problems(config), *map(render_rule_issue, rules), *_core_group_problems(config)]


def bypass_mode(config: Any) -> bool:
    """verl's bypass mode (`algorithm.rollout_correction.bypass_mode=true`): the old log-probs are the rollout's."""
    return is_bypass_mode(reader(config))


# ----------------------------------------------------------------------------------------------
# The core config
# ----------------------------------------------------------------------------------------------


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def core_data(
    config: DictConfig, translation: Translation, total_training_steps: int | None
) -> dict[str, Any]:
    """`remote_backend.core` plus the values verl owns, as plain data for `ArcticRLConfig`."""
    user = reader(config)(CORE_PREFIX) or {}
    data = _merge(user if isinstance(user, dict) else {}, translation.core_data())
    data.setdefault("optimizer", {})["total_training_steps"] = total_training_steps
    kind = (data.get("backend") or {}).get("kind", "reference")
    if kind != "reference":
        data.setdefault("model", {})["name"] = str(config.actor_rollout_ref.model.path)
    derived = derived_model(config, data)
    if derived is not None:  # every Arctic job loads the folder with verl's overrides applied
        if kind == "reference":
            data["backend"].setdefault("reference", {})["model_path"] = derived.folder
        else:
            data["model"]["name"] = derived.folder
    return data


def derived_model(config: DictConfig, data: dict[str, Any]) -> DerivedModel | None:
    """The model folder the Arctic jobs load when `model.override_config` sets more than
    `attn_implementation` (adapter_verl.model_overrides); None otherwise, and for the reference engine's
    tiny model (backend.reference.model_path unset: no folder to derive from)."""
    read = reader(config)
    overrides = config_overrides(read(OVERRIDE_FIELD))
    if not overrides:
        return None
    if (data.get("backend") or {}).get("kind", "reference") == "reference":
        base = read(f"{CORE_PREFIX}.backend.reference.model_path")  # as the user gave it
    else:
        base = read(f"{M}.path")
    if base is None:
        return None
    run_folder = os.path.abspath(str(read("trainer.default_local_dir")))
    return DerivedModel(str(base), overrides, os.path.join(run_folder, FOLDER_NAME))


def override_config_check(config: DictConfig, data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notices) of `model.override_config` on the Arctic path: the overrides against the
    model's config.json (when it is on this machine; else checked at start-up), and whether the server
    can read the derived folder."""
    override_config = reader(config)(OVERRIDE_FIELD)
    if not config_overrides(override_config):
        return [], []
    backend = data.get("backend") or {}
    kind = backend.get("kind", "reference")
    derived = derived_model(config, data)
    if derived is None:  # the reference engine's tiny model
        return [], [
            f"{OVERRIDE_FIELD}: the reference engine builds its tiny model from backend.reference.* and takes no "
            "Hugging Face overrides (verl's own model config has them): set "
            f"{CORE_PREFIX}.backend.reference.model_path to a model folder for them to apply"
        ]
    host = str(backend.get("host", "localhost"))
    if not server_sees_local_paths(kind, host, bool(backend.get("launch_local_server"))):
        where = "Cortex" if kind == "cortex" else f"the HTTP server at {host}"
        return [
            f"{OVERRIDE_FIELD}={override_config!r}: the Arctic jobs would load a model folder made on this machine "
            f"({derived.folder}, the overrides applied), which {where} cannot read: write a model folder the server "
            "can read with the overrides in its config.json, set actor_rollout_ref.model.path to it and remove the "
            "overrides"
        ], []
    base = local_model_folder(derived.base)
    if base is None:
        return [], [
            f"{OVERRIDE_FIELD}: {derived.base!r} is not on this machine (nor in the local Hugging Face cache): the "
            "overrides are checked against its config.json at start-up, when the Arctic jobs' model folder is made"
        ]
    try:
        base_config = load_base_config(base)
    except (OSError, ValueError) as error:
        return [
            f"{OVERRIDE_FIELD}={override_config!r}: transformers cannot load {base}/config.json ({error}), so the "
            "Arctic jobs' model folder cannot be made: give a model folder whose config.json transformers loads"
        ], []
    found = check_overrides(base_config, override_config)
    if found.issues:
        return [issue.render() for issue in found.issues], []
    notices = [
        f"{OVERRIDE_FIELD}: the Arctic jobs load {derived.folder} (made at start-up: {base}'s config.json with "
        f"{', '.join(sorted(derived.overrides))} applied as verl applies them, every other file linked)"
    ]
    if found.new_keys:
        notices.append(
            f"{', '.join(found.new_keys)}: not keys of the model's config: set as verl sets them (new attributes in "
            "config.json that no code of the model reads)"
        )
    return [], notices


# core fields whose checks depend on which server loss runs (not checked when verl's loss is refused)
SERVER_LOSS_FIELDS = frozenset(
    {"loss.loss_fn", "loss.policy_loss", "loss.clip_ratio_low", "loss.clip_ratio_high", "loss.clip_ratio_c",
     "loss.loss_agg_mode", "loss.pg_loss_agg_mode"}
)  # fmt: skip


def knob(core_path: str) -> str:
    """How a verl command line sets a core field: the verl field that owns it, or `+remote_backend.core.`
    (the adapter strips the `+` where the key already exists)."""
    sources = VERL_FIELDS.sources_of(core_path)
    return sources[0] if sources else f"+{CORE_PREFIX}.{core_path}"


def fit_engine(config: DictConfig, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The Arctic engine's defaults (ZoRRo, its load balancer, the micro-batch, the ZeRO stage) fitted
    to verl's settings (arctic_rl_core.config.engine_fit): (the data, one notice per change)."""
    found = model_type_of(str(reader(config)(f"{M}.path") or ""))
    fit = fit_engine_defaults(
        data,
        model_type=found.model_type if found is not None else None,
        micro_from_token_budget=bool(reader(config)(f"{A}.use_dynamic_bsz")),
        knob=knob,
        field_name=lambda path: next(iter(VERL_FIELDS.sources_of(path)), f"{CORE_PREFIX}.{path}"),
    )
    return set_values(data, fit.values), fit.notices


@dataclass
class Resolution:
    """Everything one check of a verl config found: the core config (None when there is a
    problem), every problem (verl side first, then the core's), the settings not applied and the
    startup notices."""

    config: ArcticRLConfig | None
    problems: list[str]
    not_applicable: list[NotAppliedSetting]
    notices: list[str] = field(default_factory=list)


def resolve(config: DictConfig, total_training_steps: int | None) -> Resolution:
    """Check `config` completely: its structure, the table's rules and rejections and the core
    validation in one round."""
    translation = translate_fields(config)
    problems = [
        *_structure_problems(config),
        *map(render_rule_issue, translation.rule_issues),
        *_core_group_problems(config),
    ]
    # one verl field feeding several core fields reports its problem once
    problems.extend(dict.fromkeys(issue.render() for issue in translation.issues))
    cfg = None
    data, fitted = fit_engine(config, core_data(config, translation, total_training_steps))
    override_problems, override_notices = override_config_check(config, data)
    problems.extend(override_problems)
    try:
        cfg = ArcticRLConfig.from_dict(data, source="verl config")
    except ConfigError as error:
        mapped_bad = {issue.path for issue in translation.issues}
        loss_refused = LOSS_MODE in mapped_bad  # the loss settings' checks assume a loss the server computes
        for issue in error.issues:
            if loss_refused and issue.path in SERVER_LOSS_FIELDS:
                continue
            named = VERL_FIELDS.in_framework_terms(issue, extension_prefix=CORE_PREFIX, knob=knob)
            if not any(path in named.path for path in mapped_bad):
                problems.append(named.render())
    if cfg is not None:
        read = reader(config)
        for issue in truncated_sampling_issues(
            cfg,
            top_p=read(f"{R}.top_p"),
            top_k=read(f"{R}.top_k"),
            top_p_field=f"{R}.top_p",
            top_k_field=f"{R}.top_k",
            logprobs_mode_field=f"{R}.logprobs_mode",
        ):
            problems.append(issue.render())
    return Resolution(
        None if problems else cfg,
        problems,
        translation.not_applied,
        [*translation.notices, *fitted, *override_notices],
    )


def arctic_config_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticRLConfig:
    """The core config; raises `UnsupportedVerlSettingError` listing every problem at once."""
    resolution = resolve(config, total_training_steps)
    if resolution.problems:
        raise UnsupportedVerlSettingError(resolution.problems)
    assert resolution.config is not None
    return resolution.config


def settings_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticVerlSettings:
    """Check `config` and resolve what the workers and rollout servers need."""
    cfg = arctic_config_from_verl(config, total_training_steps)
    read = reader(config)
    derived = derived_model(config, cfg.model_dump(mode="json"))
    return ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path=str(config.actor_rollout_ref.model.path),
        trust_remote_code=bool(read("actor_rollout_ref.model.trust_remote_code") or False),
        trace_dir=read("remote_backend.trace_dir"),
        old_logprobs_from_rollout=bypass_mode(config),
        derived_model=None if derived is None else dataclasses.asdict(derived),
    )


__all__ = [
    "VERL_POLICY_LOSSES",
    "ArcticVerlSettings",
    "Resolution",
    "UnsupportedVerlSettingError",
    "arctic_config_from_verl",
    "check_supported",
    "resolve",
    "settings_from_verl",
]

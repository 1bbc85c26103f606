"""verl's composed config -> the adapter's settings and the core `ArcticRLConfig`.

verl's own fields are the source of truth for everything verl has a field for: the mapping table
(`adapter_verl.field_table.VERL_FIELDS`) classifies every leaf and maps GPU counts, colocation, TP,
vLLM engine settings, kernels, offload, batch, optimizer, loss, seed and the checkpoint folder. The
`remote_backend` Hydra group (`adapter_verl/hydra_config/remote_backend/arctic.yaml`) carries only
what verl has no field for: `remote_backend.core` holds core schema groups (backend, zorro,
arctic_inference, weight_sync, ...); repeating a verl-owned setting there is an error naming the
verl field. `resolve` checks everything in one round: the table's rejections, the structural rules
of the Arctic path and the core validation, every problem at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from adapter_verl.field_table import (
    ASYNC_TRAINER_MODE,
    CORE_WHEN_VERL_DEFAULT,
    VERL_FIELDS,
    VERL_POLICY_LOSSES,
)

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.config.framework_fields import NotAppliedSetting, Translation
    from omegaconf import DictConfig

ROLLOUT_NAME = "arctic"
TRAINER_MODE = "arctic"
CORE_PREFIX = "remote_backend.core"
RC = "algorithm.rollout_correction"
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

    def arctic_config(self) -> ArcticRLConfig:
        from arctic_rl_core.config import ArcticRLConfig

        return ArcticRLConfig.from_dict(self.core, source="verl config")


# ----------------------------------------------------------------------------------------------
# Reading a verl config
# ----------------------------------------------------------------------------------------------


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        node = node.get(part, None) if isinstance(node, Mapping) or hasattr(node, "get") else None
    return default if node is None else node


def _plain(value: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def leaves(config: Any) -> dict[str, Any]:
    """Every leaf of a verl config by dotted path, with its RAW value (an interpolation stays
    its `${...}` text, so a field that follows another compares equal to its default). An empty
    mapping is a leaf; lists are leaves."""
    from omegaconf import OmegaConf

    found: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                walk(value, path)
            else:
                found[path] = value

    walk(OmegaConf.to_container(config, resolve=False), "")
    return found


@lru_cache(maxsize=1)
def default_config() -> DictConfig:
    """The installed verl's default `ppo_trainer` config with the Arctic selection (what every
    rejection compares against)."""
    from adapter_verl.main import compose, with_arctic_defaults

    return compose(with_arctic_defaults([])[0])


@lru_cache(maxsize=1)
def default_leaves() -> dict[str, Any]:
    return leaves(default_config())


def _reader(config: Any):
    from omegaconf import OmegaConf

    def read(path: str) -> Any:
        return _plain(OmegaConf.select(config, path, default=None))

    return read


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


def translate_fields(config: DictConfig) -> Translation:
    """The mapping table over `config`: core values, the table's problems, the settings not applied.
    A field at its default interpolation (`${...}`) counts as at its default, also once verl has
    resolved the config (the trainer sees it resolved): its default is then what it follows."""
    user_raw = leaves(config)
    default_raw = default_leaves()
    read = _reader(config)
    read_default = _reader(default_config())

    def default(path: str) -> Any:
        if path in default_raw and default_raw[path] == user_raw.get(path, _ABSENT):
            return read(path)
        followed = _followed(path, default_raw)
        if followed is not None:
            return read(followed)
        return read_default(path) if path in default_raw else _ABSENT

    fields = [path for path in user_raw if not path.endswith("._target_")]
    return VERL_FIELDS.translate(read, default, fields)


# ----------------------------------------------------------------------------------------------
# verl-side checks the table cannot express
# ----------------------------------------------------------------------------------------------


def check_supported(config: DictConfig) -> list[str]:
    """verl settings the Arctic path cannot honour beyond the table's rejections, as
    'field=value: remedy' (the table's own come from `translate_fields`)."""
    problems: list[str] = []

    def bad(path: str, value: Any, remedy: str) -> None:
        problems.append(f"{path}={value!r}: {remedy}")

    defaults = default_leaves()
    for path, value in leaves(config).items():
        if path.endswith("._target_"):
            if path in defaults and defaults[path] != value:
                bad(path, value, "verl's config class for this group: remove the override")
        elif not VERL_FIELDS.entries_for(path):
            bad(
                path,
                value,
                "a field the verl mapping table does not know: remove it, or report it to adapter-verl",
            )
    if _get(config, "algorithm.adv_estimator") == "gae":
        bad(
            "algorithm.adv_estimator",
            "gae",
            "GAE needs a critic, which the Arctic path has not: set algorithm.adv_estimator=grpo",
        )
    actor = "actor_rollout_ref.actor"
    if _get(config, f"{actor}.ppo_micro_batch_size_per_gpu") is None:
        bad(
            f"{actor}.ppo_micro_batch_size_per_gpu",
            None,
            "set it: it fixes the backend's gradient-accumulation steps",
        )
    if not _get(config, "actor_rollout_ref.hybrid_engine", True):
        rollout = "actor_rollout_ref.rollout"
        if int(_get(config, f"{rollout}.nnodes", 0) or 0) <= 0:
            bad(
                f"{rollout}.nnodes",
                _get(config, f"{rollout}.nnodes"),
                "with actor_rollout_ref.hybrid_engine=false the Arctic sampling job needs its own GPUs: set "
                f"{rollout}.nnodes x {rollout}.n_gpus_per_node",
            )
    if _get(config, "actor_rollout_ref.model.trust_remote_code", False):
        kind = (_plain(_get(config, f"{CORE_PREFIX}.backend")) or {}).get("kind")
        if kind != "reference":
            bad(
                "actor_rollout_ref.model.trust_remote_code",
                True,
                "arctic-platform 0.1.4's training job loads models without trust_remote_code: use a model "
                "transformers ships (the reference backend honours it for the tokenizer)",
            )
    if is_separate_async(config):
        _check_separate_async(config, bad)
    if bypass_mode(config):
        _check_bypass_mode(config, bad)
    _check_core_group(config, bad)
    return problems


def is_separate_async(config: Any) -> bool:
    """The adapter's asynchronous mode: verl's separate-async trainer (`arctic_separate_async`)."""
    return _get(config, "trainer.v1.trainer_mode") == ASYNC_TRAINER_MODE


def bypass_mode(config: Any) -> bool:
    """verl's bypass mode (`algorithm.rollout_correction.bypass_mode=true`): verl's V1 trainer sets the old
    log-probs to the rollout's instead of calling the forwarder's compute_log_prob."""
    return bool(_get(config, f"{RC}.bypass_mode", False))


def _check_bypass_mode(config: DictConfig, bad: Any) -> None:
    """What bypass mode needs on the Arctic path, and what verl itself would leave unused in it."""
    if not is_separate_async(config):
        bad(
            f"{RC}.bypass_mode",
            True,
            "the Arctic path serves bypass mode with verl's separate_async trainer (where it lets "
            "parameter_sync_step > 1 run without pi_old); the synchronous arctic mode recomputes old "
            "log-probs (one update per sync, not built without them): set it to false, or "
            "trainer.v1.trainer_mode=separate_async",
        )
    for field in ("rollout_is", "rollout_rs"):
        value = _get(config, f"{RC}.{field}")
        if value is not None:
            bad(
                f"{RC}.{field}",
                value,
                f"verl's V1 trainer computes no rollout correction in bypass mode (old log-probs = the rollout's: "
                f"the PPO ratio already is against the sampling policy), so it would never apply: set it to null, "
                f"or {RC}.bypass_mode=false",
            )
    core_async = (_plain(_get(config, CORE_PREFIX, {})) or {}).get("async")
    if isinstance(core_async, dict) and "is_weight_cap" in core_async:
        bad(
            f"{CORE_PREFIX}.async.is_weight_cap",
            core_async["is_weight_cap"],
            f"{RC}.bypass_mode=true sends no IS weights (min(exp(old - rollout), cap) would be 1 for every "
            "token): remove it",
        )


def _check_separate_async(config: DictConfig, bad: Any) -> None:
    """What verl's separate-async trainer asserts after Ray is up, and what the Arctic path needs on
    top, at dry run."""
    rollout, actor, sep = "actor_rollout_ref.rollout", "actor_rollout_ref.actor", "trainer.v1.separate_async"
    if _get(config, "actor_rollout_ref.hybrid_engine", True):
        bad(
            "actor_rollout_ref.hybrid_engine",
            True,
            "verl's hybrid engine puts rollout replicas on the training GPUs (a colocated Arctic run: trainer and "
            "sampler take turns on the same GPUs, so generation cannot overlap training): set "
            f"actor_rollout_ref.hybrid_engine=false and give sampling its own GPUs ({rollout}.nnodes x "
            f"{rollout}.n_gpus_per_node)",
        )
    sync_step = _get(config, f"{sep}.parameter_sync_step")
    if isinstance(sync_step, int) and sync_step > 1 and not bypass_mode(config):
        bad(
            f"{sep}.parameter_sync_step",
            sync_step,
            "with more than one update per weight sync and algorithm.rollout_correction.bypass_mode=false verl "
            "recomputes old log-probs with pi_old saved on the trainer (Decoupled PPO: DetachActorWorker's "
            "save/restore of the weights to CPU around every forward after the first), and the Arctic training "
            "job keeps one copy of the weights (arctic-platform 0.1.4's only other copy is a checkpoint: a save "
            "and two loads per mini-batch); set algorithm.rollout_correction.bypass_mode=true (old log-probs = "
            f"the rollout's, no pi_old), or set it to 1 (and data.train_batch_size = {actor}.ppo_mini_batch_size)",
        )
    train_batch = _get(config, "data.train_batch_size")
    mini_batch = _get(config, f"{actor}.ppo_mini_batch_size")
    if isinstance(sync_step, int) and sync_step >= 1 and train_batch != sync_step * (mini_batch or 0):
        bad(
            "data.train_batch_size",
            train_batch,
            f"verl's separate_async needs data.train_batch_size = {sep}.parameter_sync_step x "
            f"{actor}.ppo_mini_batch_size ({sync_step} x {mini_batch})",
        )
    engine = _get(config, f"{rollout}.checkpoint_engine.backend")
    if engine == "naive":
        bad(
            f"{rollout}.checkpoint_engine.backend",
            engine,
            "verl's separate_async asserts a collective engine (its transfer to standalone replicas): set it "
            "to nccl (on the Arctic path the backend moves the weights between its own jobs either way)",
        )
    if not _get(config, f"{rollout}.calculate_log_probs", False):
        bad(
            f"{rollout}.calculate_log_probs",
            False,
            (
                f"{RC}.bypass_mode=true takes the old log-probs from the rollout"
                if bypass_mode(config)
                else "asynchronous training corrects for stale rollouts with truncated IS weights from the "
                "rollout log-probs"
            )
            + ": set it to true",
        )


def _check_core_group(config: DictConfig, bad: Any) -> None:
    core = _plain(_get(config, CORE_PREFIX, {})) or {}
    if not isinstance(core, dict):
        bad(CORE_PREFIX, core, "must be a mapping of core schema groups")
        return
    for core_path in sorted(VERL_FIELDS.core_fields()):
        group, _, key = core_path.partition(".")
        values = core.get(group)
        if isinstance(values, dict) and key in values:
            if core_path == "placement.log_prob_gpus":
                continue  # verl has no field for it: the derived value is a default
            verl_field = CORE_WHEN_VERL_DEFAULT.get(core_path)
            if verl_field is not None and not _get(config, verl_field):
                continue  # verl's field at its default leaves the core field to remote_backend.core
            bad(
                f"{CORE_PREFIX}.{core_path}",
                values[key],
                f"verl owns it: set {' / '.join(VERL_FIELDS.sources_of(core_path))} instead",
            )
    model_name = (core.get("model") or {}).get("name") if isinstance(core.get("model"), dict) else None
    if model_name is not None:
        bad(f"{CORE_PREFIX}.model.name", model_name, "verl owns it: set actor_rollout_ref.model.path instead")


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
    user = _plain(_get(config, CORE_PREFIX, {})) or {}
    data = _merge(user if isinstance(user, dict) else {}, translation.core_data())
    data.setdefault("optimizer", {})["total_training_steps"] = total_training_steps
    kind = (data.get("backend") or {}).get("kind", "reference")
    if kind != "reference":
        data.setdefault("model", {})["name"] = str(config.actor_rollout_ref.model.path)
    return data


@dataclass
class Resolution:
    """Everything one check of a verl config found: the core config (None when there is a
    problem), every problem (verl side first, then the core's), the settings not applied."""

    config: ArcticRLConfig | None
    problems: list[str]
    not_applicable: list[NotAppliedSetting]


def resolve(config: DictConfig, total_training_steps: int | None) -> Resolution:
    """Check `config` completely: the table's rejections, the Arctic path's rules and the core
    validation in one round."""
    from arctic_rl_core.config import ArcticRLConfig, ConfigError

    problems = check_supported(config)
    translation = translate_fields(config)
    # one verl field feeding several core fields reports its problem once
    problems.extend(dict.fromkeys(issue.render() for issue in translation.issues))
    cfg = None
    data = core_data(config, translation, total_training_steps)
    if data is not None:
        try:
            cfg = ArcticRLConfig.from_dict(data, source="verl config")
        except ConfigError as error:
            mapped_bad = {issue.path for issue in translation.issues}
            for issue in error.issues:
                named = VERL_FIELDS.in_framework_terms(issue, extension_prefix=CORE_PREFIX)
                if not any(path in named.path for path in mapped_bad):
                    problems.append(named.render())
    if cfg is not None:
        from arctic_rl_core.config.truncated_sampling import truncated_sampling_issues

        rollout = "actor_rollout_ref.rollout"
        for issue in truncated_sampling_issues(
            cfg,
            top_p=_get(config, f"{rollout}.top_p"),
            top_k=_get(config, f"{rollout}.top_k"),
            top_p_field=f"{rollout}.top_p",
            top_k_field=f"{rollout}.top_k",
            logprobs_mode_field=f"{rollout}.logprobs_mode",
        ):
            problems.append(issue.render())
    resume_mode = _get(config, "trainer.resume_mode", "auto")
    if cfg is not None and cfg.backend.kind == "cortex" and resume_mode == "resume_path":
        from arctic_rl_core.backends.cortex_limits import CORTEX_LIMITS

        problems.append(
            f"trainer.resume_mode={resume_mode!r}: {CORTEX_LIMITS['load-checkpoint']}; set "
            "trainer.resume_mode=disable (or auto on a fresh trainer.default_local_dir) for backend.kind=cortex"
        )
    return Resolution(
        config=None if problems else cfg, problems=problems, not_applicable=translation.not_applied
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
    return ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path=str(config.actor_rollout_ref.model.path),
        trust_remote_code=bool(_get(config, "actor_rollout_ref.model.trust_remote_code", False)),
        trace_dir=_get(config, "remote_backend.trace_dir"),
        old_logprobs_from_rollout=bypass_mode(config),
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

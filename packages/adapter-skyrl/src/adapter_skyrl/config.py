"""SkyRL's config extended with `trainer.arctic_rl.*`, checked and mapped into the core schema.

Every SkyRL field is classified by `adapter_skyrl.field_table.TABLE` (mapped / rejected unless
default / not applicable / passed through, with the cross-field rules and notices beside the rows);
`trainer.arctic_rl` holds the core `ArcticRLConfig` groups SkyRL has no field for (backend,
deepspeed, zorro, arctic_inference, ...) and the legacy integration's flat knobs
(`adapter_skyrl.legacy_keys`). Settings SkyRL owns may not be repeated there. `translate` reports
every problem at once: SkyRL settings, legacy keys and core validation.
"""

# No `from __future__ import annotations`: SkyRL's config builder reads real field types.
import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.config import ArcticRLConfig, ConfigError, ConfigIssue
from arctic_rl_core.config.framework_fields import NotAppliedSetting, nest
from arctic_rl_core.config.schema import ONPREM_BACKENDS
from arctic_rl_core.config.truncated_sampling import truncated_sampling_issues
from skyrl.train.config import SkyRLTrainConfig, make_config
from skyrl.train.config.config import TrainerConfig
from skyrl.train.utils import validate_cfg

from adapter_skyrl import field_table
from adapter_skyrl.field_transforms import (
    ARCTIC_BACKEND,
    ARCTIC_ZORRO,
    SKYRL_POLICY_LOSSES,  # noqa: F401  (re-exported)
    STEPS_PER_EPOCH,
)
from adapter_skyrl.field_transforms import total_training_steps as _total_training_steps
from adapter_skyrl.legacy_keys import LEGACY_KEYS, split_dropped_keys
from adapter_skyrl.samples import reads_rollout_logprobs

OVERRIDE_ENTRYPOINT_PREFIX = "trainer.override_entrypoint="


@dataclass
class ArcticTrainerConfig(TrainerConfig):
    """SkyRL's trainer config plus `arctic_rl`: the core schema's groups, as a nested mapping."""

    arctic_rl: dict[str, Any] | None = field(default_factory=dict)
    # JSON-lines file recording every payload sent to the backend (None: no trace).
    arctic_trace_path: str | None = None


ArcticSkyRLConfig = make_config(trainer_cls=ArcticTrainerConfig)
# make_config builds the class with type(): give it an importable name so Ray can pickle configs.
ArcticSkyRLConfig.__name__ = ArcticSkyRLConfig.__qualname__ = "ArcticSkyRLConfig"
ArcticSkyRLConfig.__module__ = __name__


class UnsupportedSkyRLSettingError(ConfigError):
    """SkyRL settings the Arctic path cannot honour, with every other problem of the run (all at once)."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str | None = "the SkyRL config"):
        super().__init__(issues, source=source)
        self.problems = [issue.render() for issue in self.issues]


def strip_override_entrypoint(argv: Sequence[str]) -> list[str]:
    """Drop `trainer.override_entrypoint=...`: SkyRL's launcher reads it before parsing, and the
    strict parse rejects it (it is not a config field)."""
    return [a for a in argv if not a.startswith(OVERRIDE_ENTRYPOINT_PREFIX)]


def parse_cli(argv: Sequence[str]) -> SkyRLTrainConfig:
    """SkyRL's strict CLI parse with the `trainer.arctic_rl.*` extension."""
    return ArcticSkyRLConfig.from_cli_overrides(strip_override_entrypoint(argv))


def parse_cli_with_notices(
    argv: Sequence[str], config_cls: type[SkyRLTrainConfig] | None = None
) -> tuple[SkyRLTrainConfig, list[str]]:
    """SkyRL's strict parse (of `config_cls`, default the adapter's config; `adapter_skyrl.dapo`
    passes its DAPO config), the legacy SkyRL keys dropped, with notices. A field only SkyRL's DAPO example
    defines is refused naming the DAPO entry point."""
    kept, notices = split_dropped_keys(strip_override_entrypoint(argv))
    cls = config_cls or ArcticSkyRLConfig
    try:
        return cls.from_cli_overrides(kept), notices
    except ValueError as error:
        dapo = sorted(name for name in DAPO_ONLY_FIELDS if name in str(error))
        if dapo and cls is ArcticSkyRLConfig:
            raise ValueError(
                f"{error} ({', '.join(dapo)}: defined by SkyRL's DAPO example (its DAPOConfig and trainer "
                "subclass), not by SkyRL's config; fix: run python -m adapter_skyrl.dapo, the adapter's "
                "counterpart of examples/train/algorithms/dapo/main_dapo*.py)"
            ) from error
        raise


# Fields of SkyRL's DAPO example config (adapter_skyrl.dapo), not of SkyRL's own.
DAPO_ONLY_FIELDS = ("overlong_buffer_len", "overlong_buffer_penalty_factor")


# ----------------------------------------------------------------------------------------------
# Translation
# ----------------------------------------------------------------------------------------------

DEFAULT_BACKEND = "ray"  # the Arctic server on the local Ray cluster; the reference engine only when named
_DEFAULTS: dict[type, SkyRLTrainConfig] = {}


def skyrl_defaults(config_cls: type[SkyRLTrainConfig] | None = None) -> SkyRLTrainConfig:
    """The defaults of `config_cls` (the adapter's config unless named: the DAPO one adds two fields)."""
    cls = config_cls or ArcticSkyRLConfig
    if cls not in _DEFAULTS:
        _DEFAULTS[cls] = cls()
    return _DEFAULTS[cls]


def config_leaves(config_cls: type[SkyRLTrainConfig] | None = None) -> list[str]:
    return list(field_table.leaves(skyrl_defaults(config_cls)))


@dataclass
class SkyRLTranslation:
    """A SkyRL config on the Arctic path: the core config (None when there are problems), every
    problem, the notices (legacy keys read as aliases, what the settings mean) and the SkyRL settings
    that do not apply."""

    arctic: ArcticRLConfig | None
    issues: list[ConfigIssue] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    not_applied: list[NotAppliedSetting] = field(default_factory=list)

    def raise_for_issues(self) -> ArcticRLConfig:
        if self.issues or self.arctic is None:
            raise UnsupportedSkyRLSettingError(self.issues)
        return self.arctic


def _extension(cfg: SkyRLTrainConfig) -> dict[str, Any]:
    value = getattr(cfg.trainer, "arctic_rl", None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UnsupportedSkyRLSettingError(
            [
                ConfigIssue(
                    "trainer.arctic_rl",
                    value,
                    "must be a mapping",
                    "give core groups, e.g. trainer.arctic_rl={}",
                )
            ]
        )
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _explicit_zorro(core: Mapping[str, Any], legacy: Mapping[str, Any]) -> Any:
    zorro = core.get("zorro")
    if isinstance(zorro, Mapping) and "enable" in zorro:
        return zorro["enable"]
    return legacy.get("zorro.enable")


def _zorro_unfit(cfg: SkyRLTrainConfig) -> str | None:
    """Why ZoRRo, on by default on the Arctic server, cannot serve this SkyRL config (None: it can)."""
    trainer = cfg.trainer
    if not trainer.flash_attn:
        return "trainer.flash_attn=false (sdpa attention), and ZoRRo packs sequences with flash attention"
    placement = trainer.placement
    dp = (
        placement.policy_num_gpus_per_node
        * placement.policy_num_nodes
        // trainer.policy.sequence_parallel_size
    )
    if trainer.policy_mini_batch_size % dp:
        return (
            f"trainer.policy_mini_batch_size={trainer.policy_mini_batch_size} prompts do not split into whole prompt "
            f"groups over {dp} data-parallel ranks (ZoRRo's micro-batches are whole groups), so "
            "trainer.micro_train_batch_size_per_gpu applies"
        )
    return None


def translate(cfg: SkyRLTrainConfig, *, steps_per_epoch: int | None) -> SkyRLTranslation:
    """Every problem at once: SkyRL settings (the field table's rows and rules), legacy keys, and core
    validation."""
    issues: list[ConfigIssue] = []
    extension = _extension(cfg)
    legacy_flat = {k: v for k, v in extension.items() if k in LEGACY_KEYS}
    core_groups = {k: v for k, v in extension.items() if k not in LEGACY_KEYS}
    legacy = LEGACY_KEYS.resolve(legacy_flat)
    issues += legacy.issues

    backend = (
        core_groups.setdefault("backend", {}) if isinstance(core_groups.get("backend", {}), dict) else {}
    )
    kind = backend.setdefault("kind", DEFAULT_BACKEND) if isinstance(backend, dict) else DEFAULT_BACKEND
    zorro = _explicit_zorro(core_groups, legacy.values)
    zorro_on = bool(zorro) if zorro is not None else kind in ONPREM_BACKENDS
    defaults_notices = []
    unfit = _zorro_unfit(cfg) if zorro is None and zorro_on else None
    if unfit:  # our default must not fail the user's config: ZoRRo off, said aloud
        zorro_on = False
        core_groups.setdefault("zorro", {})["enable"] = False
        defaults_notices.append(
            f"ZoRRo off: {unfit} (trainer.arctic_rl.zorro.enable=true asks for it anyway)"
        )

    context = {ARCTIC_ZORRO: zorro_on, ARCTIC_BACKEND: dict(backend)}
    read = field_table.reader(cfg, {**context, STEPS_PER_EPOCH: steps_per_epoch})
    default = field_table.reader(skyrl_defaults(type(cfg)), {**context, STEPS_PER_EPOCH: None})
    table = field_table.TABLE.translate(read, default, config_leaves(type(cfg)))
    issues += table.issues
    values = dict(table.values)
    if kind == "reference":
        values["model.name"] = None  # the reference engine builds its own tiny model
    repeated = _owned_repeated(core_groups, values)
    issues += repeated
    for issue in repeated:  # reported once: not validated a second time by the core
        group, name = issue.path.removeprefix("trainer.arctic_rl.").split(".", 1)
        del core_groups[group][name]
    issues += _legacy_collisions(values, legacy.values, read, default)
    issues += table.rule_issues

    data = _merge(nest(values), core_groups)
    arctic = provisional = None
    try:
        arctic = provisional = ArcticRLConfig.from_dict(data)
    except ConfigError as error:
        issues += [_core_issue(issue, legacy_flat) for issue in error.issues]
        # the later checks still run, on the config without the refused settings (every problem at once)
        provisional = _without(data, [issue.path for issue in error.issues])
    if provisional is not None:
        sampling = cfg.generator.sampling_params
        issues += truncated_sampling_issues(
            provisional,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            top_p_field="generator.sampling_params.top_p",
            top_k_field="generator.sampling_params.top_k",
            logprobs_mode_field="trainer.arctic_rl.vllm.logprobs_mode",
            reads_rollout_logprobs=reads_rollout_logprobs(cfg),
        )
    if issues:
        arctic = None
    notices = [*legacy.notices, *defaults_notices, *table.notices]
    return SkyRLTranslation(arctic, issues, notices, table.not_applied)


def _without(data: Mapping[str, Any], paths: Sequence[str]) -> ArcticRLConfig | None:
    """The core config of `data` with the settings at `paths` left at their defaults (None if it
    still does not validate): what the checks after core validation look at when it failed."""
    trimmed = copy.deepcopy(dict(data))
    for path in paths:
        node, *rest = path.split(".")
        parent: Any = trimmed
        for part in rest:
            parent = parent.get(node) if isinstance(parent, dict) else None
            node = part
        if isinstance(parent, dict):
            parent.pop(node, None)
    try:
        return ArcticRLConfig.from_dict(trimmed)
    except ConfigError:
        return None


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _owned_repeated(core_groups: Mapping[str, Any], values: Mapping[str, Any]) -> list[ConfigIssue]:
    """SkyRL-owned core fields repeated under trainer.arctic_rl with a value other than SkyRL's."""
    owned = field_table.owned_core_fields()
    found = []
    for group, sub in core_groups.items():
        if not isinstance(sub, Mapping):
            continue
        for name, value in list(sub.items()):
            core = f"{group}.{name}"
            if core in owned and core in values and _same(values[core], value):
                del sub[name]  # the same value twice: one source of truth, nothing to report
            elif core in owned:
                found.append(
                    ConfigIssue(
                        f"trainer.arctic_rl.{core}",
                        value,
                        f"SkyRL owns this setting (SkyRL's fields give {values.get(core)!r})",
                        f"set {owned[core]} instead (and remove trainer.arctic_rl.{core})",
                    )
                )
    return found


def _legacy_collisions(
    values: dict[str, Any], legacy: Mapping[str, Any], read: Any, default: Any
) -> list[ConfigIssue]:
    """A legacy key naming a core field SkyRL also feeds: the legacy value while SkyRL's fields are at
    their defaults (colocation: always, as in the legacy integration), an error when both are set and
    differ."""
    found = []
    for core, value in legacy.items():
        sources = field_table.TABLE.sources_of(core)
        if not sources or core not in values or core == "placement.colocate":
            values[core] = value
            continue
        at_default = all(_same(read(s), default(s)) for s in sources)
        if at_default or _same(values[core], value):
            values[core] = value
            continue
        old = LEGACY_KEYS.old_key_for(core)
        shown = ", ".join(f"{s}={read(s)!r}" for s in sources)
        found.append(
            ConfigIssue(
                f"trainer.arctic_rl.{old}",
                value,
                f"conflicts with SkyRL's own setting ({shown}, i.e. core {core}={values[core]!r})",
                f"keep one: remove trainer.arctic_rl.{old}, or make {' / '.join(sources)} agree",
            )
        )
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _core_issue(issue: ConfigIssue, legacy_flat: Mapping[str, Any]) -> ConfigIssue:
    """A core validation issue named by the SkyRL field, the legacy key or the trainer.arctic_rl path."""
    for old in legacy_flat:
        entry = LEGACY_KEYS.entry(old)
        if getattr(entry, "core", None) == issue.path:
            return dataclasses.replace(issue, path=f"trainer.arctic_rl.{old} (core {issue.path})")
    return field_table.TABLE.in_framework_terms(issue, extension_prefix="trainer.arctic_rl")


def check_supported(cfg: SkyRLTrainConfig, *, steps_per_epoch: int | None = None) -> SkyRLTranslation:
    """Raise `UnsupportedSkyRLSettingError` listing every problem; return the translation otherwise."""
    result = translate(cfg, steps_per_epoch=steps_per_epoch)
    result.raise_for_issues()
    return result


def to_arctic_config(cfg: SkyRLTrainConfig, *, steps_per_epoch: int | None) -> ArcticRLConfig:
    """The core config for this SkyRL run (raises `UnsupportedSkyRLSettingError` with every problem)."""
    return translate(cfg, steps_per_epoch=steps_per_epoch).raise_for_issues()


def skyrl_validation_issues(cfg: SkyRLTrainConfig, arctic: ArcticRLConfig | None) -> list[ConfigIssue]:
    """SkyRL's own `validate_cfg` on the config the run uses (aligned with the Arctic run's DP,
    micro-batch and colocation), its first failure as an issue."""

    view = copy.deepcopy(cfg)
    if arctic is not None:
        align_with_arctic(view, arctic)
    try:
        validate_cfg(view)
    except (AssertionError, ValueError, NotImplementedError, TypeError) as error:
        return [
            ConfigIssue(
                "SkyRL validate_cfg", type(error).__name__, str(error), "change the SkyRL setting it names"
            )
        ]
    return []


def align_with_arctic(cfg: SkyRLTrainConfig, arctic: ArcticRLConfig) -> None:
    """Make SkyRL's view of the run the Arctic run's: its data-parallel size (GPUs / SP), micro-batch,
    no SkyRL engines to colocate or scrape (the Arctic jobs are colocated by the backend)."""
    place = arctic.placement
    cfg.trainer.placement.policy_num_nodes = 1
    cfg.trainer.placement.policy_num_gpus_per_node = place.training_gpus
    cfg.trainer.policy.sequence_parallel_size = place.ulysses_sequence_parallel_size
    cfg.trainer.micro_train_batch_size_per_gpu = int(arctic.batch.micro_batch_size_per_gpu)
    cfg.trainer.placement.colocate_all = False
    cfg.generator.inference_engine.enable_ray_prometheus_stats = False


def total_training_steps(cfg: SkyRLTrainConfig, steps_per_epoch: int) -> int:
    """Global training steps of the run, as SkyRL's trainer computes them."""
    return _total_training_steps(field_table.reader(cfg, {STEPS_PER_EPOCH: steps_per_epoch}))

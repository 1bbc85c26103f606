"""SkyRL's config extended with `trainer.arctic_rl.*`, checked and mapped into the core schema.

Every SkyRL field is classified by `adapter_skyrl.field_table.TABLE` (mapped / rejected unless
default / not applicable / passed through); `trainer.arctic_rl` holds the core `ArcticRLConfig`
groups SkyRL has no field for (backend, deepspeed, zorro, arctic_inference, ...) and the seed
integration's flat knobs (`adapter_skyrl.seed_keys`). Settings SkyRL owns may not be repeated there.
`translate` reports every problem at once: SkyRL settings, seed keys and core validation.
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

from adapter_skyrl import field_table
from adapter_skyrl.field_table import SKYRL_POLICY_LOSSES  # noqa: F401  (re-exported)
from adapter_skyrl.seed_keys import SEED_KEYS

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


# Keys of the SkyRL release the seed integration ran on that SkyRL 0.4.0 no longer has: the seed's
# launchers pass them. Each is dropped before SkyRL's strict parse, with a notice (see `parse_cli`).
SEED_SKYRL_KEYS: Mapping[str, str] = {
    "generator.inference_engine.async_engine": "SkyRL 0.4.0 has no such field; the Arctic server's vLLM engines "
    "are asynchronous",
    "trainer.use_sample_packing": "SkyRL 0.4.0 has no such field; the Arctic server packs sequences itself "
    "(ZoRRo, unpadded)",
}


def split_dropped_keys(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(argv without the seed's dropped SkyRL keys, one notice per dropped key)."""
    kept, notices = [], []
    for arg in argv:
        key = arg.lstrip("+").split("=", 1)[0]
        if key in SEED_SKYRL_KEYS:
            notices.append(f"{arg}: dropped; {SEED_SKYRL_KEYS[key]}")
        else:
            kept.append(arg)
    return kept, notices


def parse_cli_with_notices(
    argv: Sequence[str], config_cls: type[SkyRLTrainConfig] | None = None
) -> tuple[SkyRLTrainConfig, list[str]]:
    """SkyRL's strict parse (of `config_cls`, default the adapter's config; `adapter_skyrl.dapo`
    passes its DAPO config), the seed's dropped keys as notices. A field only SkyRL's DAPO example
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
    problem, the notices (seed keys read as aliases) and the SkyRL settings that do not apply."""

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


def translate(cfg: SkyRLTrainConfig, *, steps_per_epoch: int | None) -> SkyRLTranslation:
    """Every problem at once: SkyRL settings (the field table), seed keys, and core validation."""
    issues: list[ConfigIssue] = []
    extension = _extension(cfg)
    legacy_flat = {k: v for k, v in extension.items() if k in SEED_KEYS}
    core_groups = {k: v for k, v in extension.items() if k not in SEED_KEYS}
    legacy = SEED_KEYS.resolve(legacy_flat)
    issues += legacy.issues

    backend = (
        core_groups.setdefault("backend", {}) if isinstance(core_groups.get("backend", {}), dict) else {}
    )
    kind = backend.setdefault("kind", DEFAULT_BACKEND) if isinstance(backend, dict) else DEFAULT_BACKEND
    zorro = _explicit_zorro(core_groups, legacy.values)
    zorro_on = bool(zorro) if zorro is not None else kind in ONPREM_BACKENDS

    context = {field_table.ARCTIC_ZORRO: zorro_on, field_table.ARCTIC_BACKEND: dict(backend)}
    read = field_table.reader(cfg, {**context, "@data.steps_per_epoch": steps_per_epoch})
    default = field_table.reader(skyrl_defaults(type(cfg)), {**context, "@data.steps_per_epoch": None})
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
    issues += _seed_collisions(values, legacy.values, read, default)
    issues += _cross_field(cfg, core_groups, values)

    data = _merge(nest(values), core_groups)
    arctic = provisional = None
    try:
        arctic = provisional = ArcticRLConfig.from_dict(data)
    except ConfigError as error:
        issues += [_core_issue(issue, legacy_flat) for issue in error.issues]
        # the later checks still run, on the config without the refused settings (every problem at once)
        provisional = _without(data, [issue.path for issue in error.issues])
    if provisional is not None:
        from adapter_skyrl.samples import reads_rollout_logprobs

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
    notices = [*legacy.notices, *dapo_notices(cfg), *dynamic_sampling_notices(cfg)]
    return SkyRLTranslation(arctic, issues, notices, table.not_applied)


DYNAMIC_SAMPLING_TYPES = ("filter", "replace")


def dynamic_sampling_notices(cfg: SkyRLTrainConfig) -> list[str]:
    """What SkyRL's synchronous trainer does with `trainer.algorithm.dynamic_sampling`, said aloud
    (it runs in SkyRL's trainer, not on the server), and its settings that have no effect."""
    ds, n = cfg.trainer.algorithm.dynamic_sampling, cfg.generator.n_samples_per_prompt
    defaults = skyrl_defaults().trainer.algorithm.dynamic_sampling
    limit = "no limit" if ds.max_sample_batches <= 0 else f"at most {ds.max_sample_batches}"
    notices = []
    if ds.type == "filter":
        notices.append(
            f"dynamic sampling (filter, SkyRL's trainer): groups whose {n} rewards are all equal are dropped and "
            f"the next dataloader batch is generated until {cfg.trainer.train_batch_size} groups are kept "
            f"({limit} generate calls a step, then the run stops); the LR schedule counts dataloader batches, "
            "as SkyRL's does"
        )
    elif ds.type == "replace":
        notices.append(
            f"dynamic sampling (replace, SkyRL's trainer): groups whose {n} rewards are all equal are replaced by "
            f"copies of groups with reward variance when more than {ds.min_replace_ratio:g} of the batch's groups "
            f"have it, else the next dataloader batch is generated ({limit} generate calls a step, then the run "
            "stops); the LR schedule counts dataloader batches, as SkyRL's does"
        )
    if ds.type in DYNAMIC_SAMPLING_TYPES and n == 1:
        notices.append("dynamic sampling with generator.n_samples_per_prompt=1: SkyRL keeps every group")
    unused = []
    if ds.type is None and ds.max_sample_batches != defaults.max_sample_batches:
        unused.append(f"max_sample_batches={ds.max_sample_batches}")
    if ds.type != "replace" and ds.min_replace_ratio != defaults.min_replace_ratio:
        unused.append(f"min_replace_ratio={ds.min_replace_ratio:g}")
    if unused:
        notices.append(
            f"trainer.algorithm.dynamic_sampling {', '.join(unused)} has no effect with type={ds.type} "
            "(SkyRL reads max_sample_batches with a type, min_replace_ratio with replace)"
        )
    return notices


def dynamic_sampling_issues(cfg: SkyRLTrainConfig) -> list[ConfigIssue]:
    """What SkyRL's trainer would raise on its first step (an unknown type) or never finish (replace
    that can never replace), reported at dry run."""
    ds = cfg.trainer.algorithm.dynamic_sampling
    if ds.type is not None and ds.type not in DYNAMIC_SAMPLING_TYPES:
        return [
            ConfigIssue(
                "trainer.algorithm.dynamic_sampling.type",
                ds.type,
                "SkyRL's trainer knows filter (DAPO) and replace (POLARIS) and raises on anything else",
                "use filter, replace or null",
            )
        ]
    if ds.type == "replace" and not 0 <= ds.min_replace_ratio < 1:
        return [
            ConfigIssue(
                "trainer.algorithm.dynamic_sampling.min_replace_ratio",
                ds.min_replace_ratio,
                "SkyRL replaces only when MORE than this share of the batch's groups has reward variance: at 1 or "
                "more it never replaces and generates batch after batch until max_sample_batches stops the run",
                "set it in [0, 1) (SkyRL's default 0.3)",
            )
        ]
    return []


def dapo_notices(cfg: SkyRLTrainConfig) -> list[str]:
    """DAPO's reward and loss-mask shaping, which runs in the adapter (not on the server), said aloud."""
    notices = []
    algo, gen = cfg.trainer.algorithm, cfg.generator
    if getattr(algo, "overlong_buffer_len", None) is not None:  # the DAPO config (adapter_skyrl.dapo)
        max_len = gen.sampling_params.max_generate_length
        notices.append(
            f"DAPO soft overlong punishment: rewards fall linearly over the last {algo.overlong_buffer_len} of "
            f"{max_len} response tokens, by up to {algo.overlong_buffer_penalty_factor} (adapter_skyrl.dapo)"
        )
    if gen.apply_overlong_filtering:
        notices.append(
            "DAPO overlong filtering: a response truncated at generator.sampling_params.max_generate_length "
            "trains no token (all-zero loss mask, as SkyRL's generator sets it)"
        )
    return notices


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


def _seed_collisions(
    values: dict[str, Any], seed: Mapping[str, Any], read: Any, default: Any
) -> list[ConfigIssue]:
    """A seed key naming a core field SkyRL also feeds: the seed's value while SkyRL's fields are at
    their defaults (colocation: always, as in the seed), an error when both are set and differ."""
    found = []
    for core, value in seed.items():
        sources = field_table.TABLE.sources_of(core)
        if not sources or core not in values or core == "placement.colocate":
            values[core] = value
            continue
        at_default = all(_same(read(s), default(s)) for s in sources)
        if at_default or _same(values[core], value):
            values[core] = value
            continue
        old = SEED_KEYS.old_key_for(core)
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


def _cross_field(
    cfg: SkyRLTrainConfig, core_groups: Mapping[str, Any], values: Mapping[str, Any]
) -> list[ConfigIssue]:
    found = []
    kernels = core_groups.get("kernels") if isinstance(core_groups.get("kernels"), Mapping) else {}
    attn = kernels.get("attn_implementation")
    if attn is not None:
        flash = str(attn).startswith("flash_attention")
        if flash != bool(cfg.trainer.flash_attn):
            found.append(
                ConfigIssue(
                    "trainer.arctic_rl.kernels.attn_implementation",
                    attn,
                    f"disagrees with SkyRL's trainer.flash_attn={cfg.trainer.flash_attn}",
                    f"set trainer.flash_attn={str(flash).lower()}, or choose a matching attention implementation",
                )
            )
    policy, ref = cfg.trainer.policy.model.path, cfg.trainer.ref.model.path
    if ref != skyrl_defaults().trainer.ref.model.path and ref != policy:
        found.append(
            ConfigIssue(
                "trainer.ref.model.path",
                ref,
                f"the Arctic log-prob job serves the policy's initial weights ({policy!r}), not another model",
                "unset trainer.ref.model.path or set it to trainer.policy.model.path",
            )
        )
    backend = core_groups.get("backend") if isinstance(core_groups.get("backend"), Mapping) else {}
    if backend.get("kind") == "cortex" and cfg.trainer.resume_mode == "from_path":
        from arctic_rl_core.backends.cortex_limits import CORTEX_LIMITS

        found.append(
            ConfigIssue(
                "trainer.resume_mode",
                cfg.trainer.resume_mode,
                CORTEX_LIMITS["load-checkpoint"],
                "set trainer.resume_mode=none (or latest on a fresh trainer.ckpt_path) for backend.kind=cortex",
            )
        )
    algo = cfg.trainer.algorithm
    rollout_cispo = algo.policy_loss_type == "cispo" and algo.cispo.cispo_anchor == "rollout"
    if rollout_cispo and (algo.off_policy_correction.tis_ratio_type is not None or algo.use_tis):
        found.append(
            ConfigIssue(
                "trainer.algorithm.off_policy_correction.tis_ratio_type",
                algo.off_policy_correction.tis_ratio_type or "token (use_tis)",
                "cispo with cispo_anchor=rollout is already the off-policy correction; TIS would count it "
                "twice (SkyRL's cispo raises)",
                "unset tis_ratio_type (and use_tis)",
            )
        )
    found += fully_async_issues(cfg)
    found += dynamic_sampling_issues(cfg)
    from adapter_skyrl.registries import environment_issues, estimator_issues

    found += environment_issues(cfg) + estimator_issues(cfg)
    if algo.use_kl_loss and algo.kl_ctrl.type != "fixed":
        found.append(
            ConfigIssue(
                "trainer.algorithm.kl_ctrl.type",
                algo.kl_ctrl.type,
                "with use_kl_loss=true the KL coefficient is fixed on the Arctic server",
                "use trainer.algorithm.kl_ctrl.type=fixed",
            )
        )
    return found


def fully_async_issues(cfg: SkyRLTrainConfig) -> list[ConfigIssue]:
    """What SkyRL's `FullyAsyncRayPPOTrainer` asserts when it is built (after the backend is up),
    reported with the rest at dry run; colocation is refused with the reason."""
    fa, trainer, algo = cfg.trainer.fully_async, cfg.trainer, cfg.trainer.algorithm
    if not fa.enabled:
        return []
    found = []
    if trainer.placement.colocate_all:
        found.append(
            ConfigIssue(
                "trainer.placement.colocate_all",
                True,
                "SkyRL's fully asynchronous trainer overlaps generation with training; colocated Arctic jobs "
                "share the GPUs and take turns (the sampler sleeps while the trainer runs), so nothing can "
                "overlap (SkyRL itself refuses colocate_all with fully_async)",
                "set trainer.placement.colocate_all=false (separate training and sampling GPUs), or "
                "trainer.fully_async.enabled=false",
            )
        )
    mini = trainer.policy_mini_batch_size
    if trainer.train_batch_size != mini:
        found.append(
            ConfigIssue(
                "trainer.train_batch_size",
                trainer.train_batch_size,
                f"SkyRL's fully async trainer trains one mini-batch per step (policy_mini_batch_size={mini})",
                f"set trainer.train_batch_size={mini}",
            )
        )
    workers, k = fa.num_parallel_generation_workers, fa.max_staleness_steps
    if not mini <= workers <= mini * (k + 1):
        found.append(
            ConfigIssue(
                "trainer.fully_async.num_parallel_generation_workers",
                workers,
                f"SkyRL needs policy_mini_batch_size <= workers <= policy_mini_batch_size x (max_staleness_steps "
                f"+ 1) = {mini * (k + 1)} (fewer waste throughput, more can never all run)",
                f"set it between {mini} and {mini * (k + 1)}",
            )
        )
    if cfg.generator.batched:
        found.append(
            ConfigIssue(
                "generator.batched",
                True,
                "SkyRL's fully async trainer generates one prompt group per request",
                "set generator.batched=false",
            )
        )
    if algo.dynamic_sampling.type is not None:
        found.append(
            ConfigIssue(
                "trainer.algorithm.dynamic_sampling.type",
                algo.dynamic_sampling.type,
                "SkyRL's fully async trainer refuses dynamic sampling (it asserts type is null)",
                "unset it (null) and set trainer.fully_async.sample_full_batch=true with "
                "trainer.algorithm.zero_variance_filter=true (SkyRL's asynchronous equivalent of filter), or "
                "trainer.fully_async.enabled=false (SkyRL's synchronous trainer runs filter and replace)",
            )
        )
    if fa.sample_full_batch and not algo.zero_variance_filter:
        found.append(
            ConfigIssue(
                "trainer.fully_async.sample_full_batch",
                True,
                "SkyRL drops zero-variance groups only with the zero-variance filter on",
                "set trainer.algorithm.zero_variance_filter=true",
            )
        )
    from adapter_skyrl.samples import rollout_anchored

    if not rollout_anchored(algo) and algo.policy_loss_type != "dppo":
        found.append(
            ConfigIssue(
                "trainer.algorithm.policy_loss_type",
                algo.policy_loss_type,
                "SkyRL's fully async trainer keeps no stale policies to recompute old log-probs from: the loss "
                "must optimize against the rollout log-probs",
                "use rollout_is (SkyRL's fully async examples do), or cispo with "
                "trainer.algorithm.cispo.cispo_anchor=rollout",
            )
        )
    return found


def _core_issue(issue: ConfigIssue, legacy_flat: Mapping[str, Any]) -> ConfigIssue:
    """A core validation issue named by the SkyRL field, the seed key or the trainer.arctic_rl path."""
    for old in legacy_flat:
        entry = SEED_KEYS.entry(old)
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
    from skyrl.train.utils import validate_cfg

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
    steps = steps_per_epoch * cfg.trainer.epochs
    if cfg.trainer.max_training_steps is not None:
        steps = min(steps, cfg.trainer.max_training_steps)
    return steps

"""`python -m adapter_verl.main [--dry-run] <verl overrides>`: verl's `main_ppo` V1 path on Arctic RL.

Before anything starts: rewrites the overrides of Arctic-Platform's verl launchers
(`adapter_verl.incumbent`), merges the user's `hydra.searchpath` with the adapter's, accepts
`actor_rollout_ref.rollout.name=vllm` as the Arctic server's vLLM, adds the overrides that select the
Arctic path (printed, never silent), composes the config and checks it completely (the mapping
table's rejections, verl's own `validate_config`, the Arctic path's rules and the core validation:
every problem at once, exit 2). `--dry-run` then prints the resolved core config exactly as
`arctic-rl config show` does, and the settings table, and exits without starting Ray. Otherwise it
turns off Ray's `uv run` runtime-env hook (see `keep_ray_off_uv_run`) and hands the overrides to
verl's own Hydra entry point.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from adapter_verl.command_line import ConfigSelection, package_folder
from adapter_verl.field_table import ASYNC_TRAINER_MODE, VERL_SEPARATE_ASYNC
from adapter_verl.verl_internals import turn_off_ray_uv_hook_constant

RAY_UV_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
EXIT_BAD_SETTINGS = 2

SEARCHPATH_ENTRY = "pkg://adapter_verl.hydra_config"
SEARCHPATH = f"hydra.searchpath=[{SEARCHPATH_ENTRY}]"
# key -> the override the adapter adds when the user did not set that key
ARCTIC_DEFAULTS: dict[str, str] = {
    "hydra.searchpath": SEARCHPATH,
    "remote_backend": "+remote_backend=arctic",
    "trainer.use_v1": "trainer.use_v1=true",
    "trainer.v1.trainer_mode": "trainer.v1.trainer_mode=arctic",
    "actor_rollout_ref.rollout.name": "actor_rollout_ref.rollout.name=arctic",
}

USAGE = """\
usage: python -m adapter_verl.main [--dry-run] [--help] [--config-path=DIR --config-name=NAME] <verl Hydra overrides>

Runs verl 0.9.1's own PPO/GRPO trainer (main_ppo, V1) with Arctic RL doing generation, log-probs,
the loss, the optimizer step and weight sync. verl's fields keep their meaning: GPUs are
trainer.nnodes x trainer.n_gpus_per_node (the hybrid engine = colocated Arctic jobs), rollout TP,
vLLM and kernel settings, batch sizes, optim.*, KL and clip settings, data.seed and
trainer.default_local_dir drive the Arctic stack. What verl has no field for goes under
+remote_backend.core.<group>.<knob> (backend.kind=ray|http|cortex|reference, zorro.*,
arctic_inference.*, weight_sync.*, deepspeed.zero_stage, ...).

  --dry-run   check everything, print the resolved core config (as `arctic-rl config show`) and
              the settings table, start nothing; exit 0, or 2 listing every problem
  --help      this text
  --config-path / --config-name
              the Hydra config verl composes, as verl's launchers pass them (a relative folder is
              looked up in the working directory, then in verl's own config folders: config names of
              verl's fully-async and one-step-off entry points select the adapter's asynchronous mode)

The adapter adds (and prints) hydra.searchpath=[pkg://adapter_verl.hydra_config] (merged with
yours), +remote_backend=arctic, trainer.use_v1=true, trainer.v1.trainer_mode=arctic and
actor_rollout_ref.rollout.name=arctic when you did not set them. Launchers of Arctic-Platform's
verl integration work unchanged but for the entry point: their remote_backend.* keys are
translated, each with a notice. So do launchers of verl's fully-async and one-step-off entry points
(their rollout.* / async_training.* keys select verl's separate-async trainer, each with a notice).
"""


# verl's other rollout engines: on the Arctic path every rollout is the Arctic server's vLLM
OTHER_ROLLOUT_ENGINES = ("sglang", "trtllm", "hf")


def config_class_accepts(key: str, existing: Any) -> bool:
    """Whether `+key` adds a field verl's config class for the group accepts (a group without a
    `_target_` is free-form: anything goes). verl instantiates each such group as a dataclass at
    startup, which raises on a field it does not declare, even one its YAML leaves out."""
    import dataclasses

    from hydra.utils import get_class

    group, _, name = key.rpartition(".")
    target = existing.get(f"{group}._target_") if isinstance(existing, dict) else None
    if not isinstance(target, str):
        return True
    try:
        cls = get_class(target)
    except (ImportError, ValueError, AttributeError):
        return True
    return not dataclasses.is_dataclass(cls) or name in {f.name for f in dataclasses.fields(cls)}


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_arctic_defaults(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """`overrides` plus the Arctic selection overrides the user did not give; returns (all, added)."""
    given = {_override_key(o) for o in overrides}
    added = [value for key, value in ARCTIC_DEFAULTS.items() if key not in given]
    return [*added, *overrides], added


def merge_searchpath(override: str) -> tuple[str, str | None]:
    """A user's `hydra.searchpath=[...]` with the adapter's entry first (its `remote_backend/arctic`
    group must win over a same-named group elsewhere); returns (override, notice)."""
    key, _, raw = override.partition("=")
    entries = [
        e.strip().strip("'\"")
        for e in raw.strip().removeprefix("[").removesuffix("]").split(",")
        if e.strip()
    ]
    if SEARCHPATH_ENTRY in entries:
        return override, None
    merged = [SEARCHPATH_ENTRY, *entries]
    return (
        f"{key}=[{','.join(merged)}]",
        f"hydra.searchpath: {SEARCHPATH_ENTRY} added before yours ({','.join(entries)})",
    )


@dataclass
class Prepared:
    """The overrides verl composes, and what the adapter said and found on the way."""

    overrides: list[str]
    added: list[str]
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    translation: object | None = None


def prepare(argv: Sequence[str]) -> Prepared:
    """Rewrite the user's overrides into what verl composes (no Hydra yet)."""
    from adapter_verl.config import default_leaves
    from adapter_verl.incumbent import translate

    translation = translate(argv)
    notices = list(translation.notices)
    problems = list(translation.problems)
    existing = default_leaves()
    out: list[str] = []
    for override in translation.overrides:
        key = _override_key(override)
        value = override.partition("=")[2]
        if key == "hydra.searchpath":
            override, notice = merge_searchpath(override)
            if notice:
                notices.append(notice)
        elif key == "remote_backend" and value != "arctic":
            problems.append(f"remote_backend={value}: the adapter's group is +remote_backend=arctic")
            continue
        elif key == "trainer.v1.trainer_mode" and value == VERL_SEPARATE_ASYNC:
            override = f"trainer.v1.trainer_mode={ASYNC_TRAINER_MODE}"
            notices.append(
                f"trainer.v1.trainer_mode={VERL_SEPARATE_ASYNC}: now {ASYNC_TRAINER_MODE} (verl's separate-async "
                "trainer with the Arctic forwarders and rollout replicas)"
            )
        elif key == "actor_rollout_ref.rollout.name" and value == "vllm":
            override = "actor_rollout_ref.rollout.name=arctic"
            notices.append(
                "actor_rollout_ref.rollout.name=vllm: now arctic (the Arctic server's vLLM engines)"
            )
        elif key == "actor_rollout_ref.rollout.name" and value in OTHER_ROLLOUT_ENGINES:
            override = "actor_rollout_ref.rollout.name=arctic"
            notices.append(
                f"actor_rollout_ref.rollout.name={value}: now arctic (the Arctic server samples with vLLM; "
                f"{value}'s own settings, actor_rollout_ref.rollout.engine_kwargs.{value}, do not apply)"
            )
        elif re.match(r"^\+[^+]", override) and key in existing:
            override = override[1:]
            notices.append(f"+{key}: {key} already exists in verl 0.9.1's config: set without '+'")
        elif override.startswith("+") and not config_class_accepts(key, existing):
            problems.append(unknown_key_problem(override, existing, config_class=True))
            continue
        out.append(override)
    overrides, added = with_arctic_defaults(out)
    return Prepared(overrides, added, notices, problems, translation)


def keep_ray_off_uv_run() -> str | None:
    """Turn off Ray's `uv run` runtime-env hook for this process; returns the notice to print (None
    when the user set `RAY_ENABLE_UV_RUN_RUNTIME_ENV` to a false value themselves).

    verl 0.9.1 calls `ray.init(runtime_env={"working_dir": None, ...})`; when the driver runs under
    `uv run` (every recipe, and `uv run arctic-rl demo --framework verl`), Ray's hook, on by default,
    rejects the None working_dir with `TypeError: path_or_uri must be a string`. Without the hook,
    Ray's workers run the cluster's Python environment: the driver's for a local cluster, the one
    `ray start` ran from on a multi-node cluster (start it from the locked environment)."""
    value = os.environ.get(RAY_UV_HOOK_ENV)
    if value is not None:
        if value.strip().lower() in ("0", "false", "no", "off", ""):
            return None
        raise SystemExit(
            f"adapter_verl: {RAY_UV_HOOK_ENV}={value!r} cannot run verl 0.9.1 under `uv run`: verl passes "
            "runtime_env working_dir=None, which Ray's uv-run hook rejects. Unset it (the adapter sets 0) and "
            "start the Ray cluster from the locked environment"
        )
    os.environ[RAY_UV_HOOK_ENV] = "0"
    turn_off_ray_uv_hook_constant()  # Ray reads the variable when it is imported: maybe done here
    return (
        f"adapter_verl: {RAY_UV_HOOK_ENV}=0 (verl passes runtime_env working_dir=None, which Ray's "
        "uv-run hook rejects; Ray workers run the cluster's Python environment)"
    )


def compose(overrides: Sequence[str], selection: ConfigSelection | None = None):
    """verl's `ppo_trainer` config (or the one `selection` names) composed with `overrides` (Hydra
    compose API, no run)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    selection = selection or ConfigSelection()
    GlobalHydra.instance().clear()
    if selection.folder is not None:
        overrides = with_selected_searchpath(overrides, selection)
        with initialize_config_dir(config_dir=str(selection.folder), version_base=None):
            return hydra_compose(config_name=selection.name, overrides=list(overrides))
    with initialize_config_module(config_module=selection.package, version_base=None):
        return hydra_compose(config_name=selection.name, overrides=list(overrides))


def with_selected_searchpath(overrides: Sequence[str], selection: ConfigSelection) -> list[str]:
    """A config outside verl's packages (a recipe's `config/` folder) names verl's configs by its own
    `hydra.searchpath` (often `file://verl/trainer/config`, relative to a verl checkout): the adapter's
    search path keeps those entries, and verl's installed package stands in for the relative one."""
    assert selection.folder is not None
    raw = yaml.safe_load((selection.folder / f"{selection.name}.yaml").read_text()) or {}
    entries = [str(e) for e in ((raw.get("hydra") or {}).get("searchpath") or [])]
    entries = ["pkg://verl.trainer.config" if e.startswith("file://verl/") else e for e in entries]
    if "pkg://verl.trainer.config" not in entries:
        entries.append("pkg://verl.trainer.config")
    out = []
    for override in overrides:
        if _override_key(override) == "hydra.searchpath":
            key, _, value = override.partition("=")
            value = value.strip().removesuffix("]")
            override = f"{key}={value},{','.join(entries)}]"
        out.append(override)
    return out


_NOT_IN_CONFIG = (
    re.compile(r"Could not override '([^']+)'"),
    re.compile(r"full_key: (\S+)"),
)


def compose_reporting(overrides: Sequence[str], selection: ConfigSelection | None = None):
    """`compose`, with every override verl's config has no field for reported (with "did you mean")
    and left out, so that the rest is still composed and checked: (config or None, problems)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    remaining = list(overrides)
    problems: list[str] = []
    for _ in range(len(remaining) + 1):
        try:
            return compose(remaining, selection), problems
        except (HydraException, OmegaConfBaseException) as error:
            unparsable = [o for o in remaining if not _parses(o)]
            if unparsable:
                for override in unparsable:
                    problems.append(
                        f"{override}: Hydra cannot parse this override (a placeholder left in the launcher, or a "
                        "value with unquoted special characters). Fix: give the value, quoted if it holds =, <, >, "
                        "spaces or brackets"
                    )
                    remaining.remove(override)
                continue
            text = f"{error} {error.__cause__ or ''}"
            key = next((m.group(1) for pattern in _NOT_IN_CONFIG if (m := pattern.search(text))), None)
            culprit = next((o for o in remaining if key is not None and _override_key(o) == key), None)
            if culprit is None:
                problems.append(f"verl's Hydra config: {error}".replace("\n", " "))
                return None, problems
            from adapter_verl.config import default_leaves

            problems.append(unknown_key_problem(culprit, default_leaves()))
            remaining.remove(culprit)
    return None, problems


def _parses(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        OverridesParser.create().parse_overrides([override])
    except HydraException:
        return False
    return True


def unknown_key_problem(override: str, existing: Any, *, config_class: bool = False) -> str:
    """'key=value: not a field of verl 0.9.1's config. Fix: did you mean ...' for `override`."""
    from arctic_rl_core.config.errors import suggest_key_among

    key, value = _override_key(override), override.partition("=")[2]
    known = {k for k in existing if not k.endswith("._target_")}
    known |= {p.rsplit(".", i)[0] for p in known for i in range(1, p.count(".") + 1)}
    group, _, name = key.rpartition(".")
    where = (
        f"{group} is a verl config class without a field {name!r} (verl's startup would fail instantiating it)"
        if config_class
        else "not a field of verl 0.9.1's config"
    )
    return f"{key}={value}: {where}. Fix: {suggest_key_among(sorted(known), group, name)}"


def override_type_problems(overrides: Sequence[str]) -> list[str]:
    """Each `key=value` override whose value, as Hydra parses it, does not have the type of verl's
    default for that key (Hydra keeps `two` and `1:2:3` as text where verl wants a number: a
    traceback later)."""
    from arctic_rl_core.config.override_values import value_problem
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from adapter_verl.config import default_leaves

    defaults = default_leaves()
    parser = OverridesParser.create()
    problems = []
    for override in overrides:
        key, sep, text = override.lstrip("+").partition("=")
        if not sep or override.startswith("~") or key not in defaults or text.lstrip().startswith("${"):
            continue
        try:
            value = parser.parse_override(override).value()
        except HydraException:  # composing reports it
            continue
        problem = value_problem(text, value, defaults[key])
        if problem is not None:
            problems.append(f"{key}={text}: {problem[0]}; {problem[1]}")
    return problems


def verl_validation_problems(config) -> list[str]:
    """verl's own startup check (`verl.utils.config.validate_config`, as `main_ppo` runs it)."""
    from hydra.errors import HydraException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(sys.stderr):  # verl prints its verdict: keep stdout the document
            validate_config(
                config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
            )
    except (AssertionError, ValueError, TypeError, KeyError) as error:
        return [f"verl's own check: {error}"]
    except HydraException as error:  # a config class of verl's refused its fields (InstantiationException)
        return [f"verl's own check: {instantiation_cause(error)}"]
    return []


def instantiation_cause(error: BaseException) -> str:
    """What a Hydra instantiation failure says, without Hydra's wrapping: the innermost cause's
    message and the config key (`full_key`) it was building."""
    cause = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    key = re.search(r"full_key: (\S+)", str(error))
    where = f" (building {key.group(1)})" if key else ""
    return f"{cause}{where}".replace("\n", " ")


@dataclass
class Check:
    """One complete check of a command line."""

    prepared: Prepared
    config: object | None  # the composed verl config
    resolution: object | None  # adapter_verl.config.Resolution
    problems: list[str]
    notices: list[str]
    selection: ConfigSelection = field(default_factory=ConfigSelection)


_FIELD = re.compile(r"^[\w.@-]+")


def _field_of(problem: str) -> str:
    match = _FIELD.match(problem)
    return match.group(0) if match else ""


def check(argv: Sequence[str]) -> Check:
    """Everything `main` checks before Ray starts, every problem at once: the command line (config
    selection, verl's other entry points, the training engine), verl's composition (keys verl has no
    field for, with "did you mean"), what the Arctic stack cannot run (critic, vision, NPUs), verl's own
    startup check, the mapping table, the Arctic path's rules and the core validation."""
    from adapter_verl import entry_points, training_engine, unsupported
    from adapter_verl.command_line import parse, select_config
    from adapter_verl.config import default_leaves, resolve
    from adapter_verl.incumbent import check_gpu_counts

    line = parse(argv)
    selection, problems = select_config(line)
    problems = [*line.problems, *problems]
    entry = entry_points.translate(line.overrides, selection)
    notices = list(entry.notices)
    engine = training_engine.refuse(entry.overrides, entry.selection, default_leaves())
    if engine.problem is not None:
        problems.append(engine.problem)
    prepared = prepare(engine.overrides)
    problems.extend(prepared.problems)
    notices.extend(prepared.notices)
    config, composition_problems = compose_reporting(prepared.overrides, engine.selection)
    problems.extend(composition_problems)
    if config is None:
        return Check(prepared, None, None, problems, notices, engine.selection)
    typed = override_type_problems(prepared.overrides)
    if typed:  # the checks below would read these values as numbers
        return Check(prepared, None, None, problems + typed, notices, engine.selection)
    refused = unsupported.refusals(config, engine.overrides)
    problems.extend(refused.problems)
    estimator = unsupported.estimator_problem(config)
    if estimator is not None:
        problems.append(estimator)
        refused.covered.add("algorithm.adv_estimator")
    gpu_notices, gpu_problems = check_gpu_counts(prepared.translation, config)
    notices.extend(gpu_notices)
    problems.extend(gpu_problems)
    if "critic" not in refused.covered and estimator is None and engine.problem is None:
        # (with a refused engine the FSDP stand-in's data parallelism is not the launcher's)
        problems.extend(verl_validation_problems(config))
    steps = config.trainer.get("total_training_steps")
    resolution = resolve(config, int(steps) if steps else None)
    problems.extend(p for p in resolution.problems if _field_of(p) not in refused.covered)
    notices.extend(async_notices(config))
    return Check(prepared, config, resolution, problems, notices, engine.selection)


def async_notices(config) -> list[str]:
    """What verl's separate-async settings mean on the Arctic path beyond the core's `async` group."""
    from adapter_verl.config import is_separate_async

    if not is_separate_async(config) or config.trainer.v1.sampler.get("max_off_policy_strategy") != "wait":
        return []
    return [
        "trainer.v1.sampler.max_off_policy_strategy=wait: verl's replay buffer holds each step until the prompts "
        "in flight that reached max_off_policy_threshold finish, so no trained rollout exceeds the bound and "
        "async.stale_policy is never applied (the core's StalenessGate still checks every trained row)"
    ]


def settings_table(result: Check) -> str:
    """The startup table: backend, model, GPUs, colocation, optimisations, settings not applied."""
    from arctic_rl_core.config.settings_table import render_settings_table

    return render_settings_table(
        result.resolution.config, framework="verl 0.9.1", not_applied=result.resolution.not_applicable
    )


def dump_document(cfg) -> str:
    """The resolved core config exactly as `arctic-rl config show` prints it."""
    from arctic_rl_core.config.show import render_config_document

    return render_config_document(cfg)


def main(argv: Sequence[str] | None = None) -> None:
    from adapter_verl.command_line import parse

    args = list(sys.argv[1:] if argv is None else argv)
    line = parse(args)
    if line.help:
        sys.stdout.write(USAGE)
        raise SystemExit(0)

    result = check([a for a in args if a != "--dry-run"])
    for notice in result.notices:
        print(f"adapter_verl: {notice}", file=sys.stderr)
    if result.prepared.added:
        print(f"adapter_verl: adding {' '.join(result.prepared.added)}", file=sys.stderr)
    if result.problems:
        count = len(result.problems)
        lines = "\n".join(f"  - {p}" for p in result.problems)
        print(
            f"adapter_verl: {count} problem{'s' if count != 1 else ''} in the settings:\n{lines}",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_BAD_SETTINGS)
    if line.dry_run:
        sys.stdout.write(dump_document(result.resolution.config))
        sys.stdout.write(settings_table(result))
        raise SystemExit(0)

    print(settings_table(result), file=sys.stderr)
    from adapter_verl.plugin import require_registered

    notice = keep_ray_off_uv_run()
    if notice:
        print(notice, file=sys.stderr)
    require_registered()

    from verl.trainer import main_ppo

    selection = result.selection
    chosen = []
    if not selection.is_default:
        folder = selection.folder or package_folder(selection.package)
        chosen = [f"--config-path={folder}", f"--config-name={selection.name}"]
    sys.argv = [sys.argv[0], *chosen, *result.prepared.overrides]
    main_ppo.main()


if __name__ == "__main__":
    main()

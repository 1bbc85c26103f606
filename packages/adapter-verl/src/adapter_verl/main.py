"""`python -m adapter_verl.main [--dry-run] <verl overrides>`: verl's `main_ppo` V1 path on Arctic RL.

Before anything starts: rewrites the overrides of Arctic-Platform's verl launchers
(`adapter_verl.legacy_keys`), merges the user's `hydra.searchpath` with the adapter's, accepts
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
from pathlib import Path

from arctic_rl_core.checkpoint_manifest import CheckpointFolder
from arctic_rl_core.config.override_values import value_problem
from arctic_rl_core.config.settings_table import render_settings_table
from arctic_rl_core.config.show import render_config_document
from arctic_rl_core.failure_messages import explain
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig

from adapter_verl import entry_points, training_engine, unsupported
from adapter_verl.command_line import ConfigSelection, override_key, package_folder, parse, select_config
from adapter_verl.compose import (
    compose,
    compose_reporting,
    config_class_accepts,
    merge_searchpath,
    unknown_key_problem,
    with_arctic_defaults,
)
from adapter_verl.config import Resolution, default_leaves, resolve
from adapter_verl.legacy_keys import LegacyOverrides, check_gpu_counts, translate
from adapter_verl.modes import ASYNC_TRAINER_MODE, ROLLOUT_NAME, VERL_SEPARATE_ASYNC
from adapter_verl.verl_internals import turn_off_ray_uv_hook_constant

# composition is adapter_verl.compose's; re-exported for the callers that compose as `main` does
__all__ = ["Check", "Prepared", "check", "compose", "main", "prepare", "with_arctic_defaults"]

RAY_UV_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
EXIT_BAD_SETTINGS = 2

USAGE = """\
usage: python -m adapter_verl.main [--dry-run] [--help] [--config-path=DIR --config-name=NAME] <verl overrides>

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


@dataclass
class Prepared:
    """The overrides verl composes, and what the adapter said and found on the way."""

    overrides: list[str]
    added: list[str]
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    translation: LegacyOverrides | None = None


def prepare(argv: Sequence[str]) -> Prepared:
    """Rewrite the user's overrides into what verl composes (no Hydra yet)."""
    translation = translate(argv)
    notices = list(translation.notices)
    problems = list(translation.problems)
    existing = default_leaves()
    out: list[str] = []
    for override in translation.overrides:
        key = override_key(override)
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
            override = f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}"
            notices.append(
                f"actor_rollout_ref.rollout.name=vllm: now {ROLLOUT_NAME} (the Arctic server's vLLM engines)"
            )
        elif any(
            key.startswith(f"actor_rollout_ref.rollout.engine_kwargs.{e}.") for e in OTHER_ROLLOUT_ENGINES
        ):
            notices.append(
                f"{key}: {key.split('.')[3]}'s engine setting: the Arctic server samples with vLLM (not applied)"
            )
            continue
        elif key == "actor_rollout_ref.rollout.name" and value in OTHER_ROLLOUT_ENGINES:
            override = f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}"
            notices.append(
                f"actor_rollout_ref.rollout.name={value}: now {ROLLOUT_NAME} (the Arctic server samples with "
                f"vLLM; {value}'s own settings, actor_rollout_ref.rollout.engine_kwargs.{value}, do not apply)"
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


def override_type_problems(overrides: Sequence[str]) -> list[str]:
    """Each `key=value` override whose value, as Hydra parses it, does not have the type of verl's
    default for that key (Hydra keeps `two` and `1:2:3` as text where verl wants a number: a
    traceback later)."""
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
            problems.append(f"{key}={text}: {problem[0]}. Fix: {problem[1]}")
    return problems


def verl_validation_problems(config) -> list[str]:
    """verl's own startup check (`verl.utils.config.validate_config`, as `main_ppo` runs it)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: PLC0415 - CLI start-up
    from verl.utils.config import validate_config  # noqa: PLC0415 - CLI start-up

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
    config: DictConfig | None  # the composed verl config
    resolution: Resolution | None
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
    line = parse(argv)
    selection, problems = select_config(line)
    problems = [*line.problems, *problems]
    entry = entry_points.translate(line.overrides, selection)
    notices = list(entry.notices)
    engine = training_engine.refuse(entry.overrides, entry.selection, default_leaves(), line.config_name)
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
    problems.extend(
        p
        for p in resolution.problems
        if _field_of(p) not in refused.covered
        # the FSDP stand-in's data parallelism is not a refused engine's (its TP / PP / CP split the GPUs)
        and not (engine.problem is not None and re.search(r"\(core (batch|placement)\.", p))
    )
    notices.extend(resolution.notices)
    return Check(prepared, config, resolution, problems, notices, engine.selection)


def settings_table(result: Check) -> str:
    """The startup table: backend, model, GPUs, colocation, optimisations, settings not applied."""
    return render_settings_table(
        result.resolution.config, framework="verl 0.9.1", not_applied=result.resolution.not_applicable
    )


def dump_document(cfg) -> str:
    """The resolved core config exactly as `arctic-rl config show` prints it."""
    return render_config_document(cfg)


def main(argv: Sequence[str] | None = None) -> None:
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

    notice = keep_ray_off_uv_run()
    if notice:
        print(notice, file=sys.stderr)
    from adapter_verl.plugin import require_registered  # noqa: PLC0415 - CLI start-up (importing it registers with verl)

    require_registered()

    from verl.trainer import main_ppo  # noqa: PLC0415 - CLI start-up

    try:
        check_resume_point(result.config)  # before Ray: a damaged checkpoint is named now
        selection = result.selection
        chosen = []
        if not selection.is_default:
            folder = selection.folder or package_folder(selection.package)
            chosen = [f"--config-path={folder}", f"--config-name={selection.name}"]
        sys.argv = [sys.argv[0], *chosen, *result.prepared.overrides]
        main_ppo.main()
    except Exception as error:  # verl's trainer runs in a Ray actor: its errors arrive wrapped
        message = explain(error, resume=RESUME_HINT)
        if message is None:
            raise
        print(f"adapter_verl: {message}", file=sys.stderr)
        raise SystemExit(1) from None


RESUME_HINT = "the same command (trainer.resume_mode=auto, the default, resumes from the last checkpoint)"


def check_resume_point(config) -> int | None:
    """The step verl would resume after (`trainer.resume_mode=auto`), every file of its checkpoint
    checked (`CheckpointDamaged` names a damaged or missing one); None for a new run or another mode."""

    from adapter_verl.trainer import VERL_LATEST_FILE  # noqa: PLC0415 - CLI start-up

    if config.trainer.get("resume_mode", "auto") != "auto":
        return None
    folder = CheckpointFolder(Path(os.path.abspath(config.trainer.default_local_dir)), VERL_LATEST_FILE)
    return folder.resume_point()


if __name__ == "__main__":
    main()

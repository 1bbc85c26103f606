"""Entry point: `python -m adapter_skyrl.main [--dry-run] <SkyRL overrides> trainer.arctic_rl.<group>.<knob>=...`,
or SkyRL's own launcher with `trainer.override_entrypoint=adapter_skyrl.main` (SkyRL calls `main()`
before its strict parse; the argument is stripped here).

The run happens in this process: the backend (the Arctic server's jobs on the local Ray cluster by
default, the reference engine when named) does the GPU work, so SkyRL needs no Ray workers of its own.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USAGE = """\
usage: python -m adapter_skyrl.main [--dry-run] [--help] <SkyRL overrides> [trainer.arctic_rl.<group>.<knob>=...]
       python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=adapter_skyrl.main [--dry-run] ...

Runs a SkyRL 0.4.0 GRPO recipe on the Arctic RL stack. SkyRL's own fields drive the run (GPUs and
nodes, engines x TP, colocate_all, vLLM knobs, batch sizes, optimizer, loss, KL, seeds, checkpoints);
trainer.arctic_rl.* holds the core groups SkyRL has no field for (backend, deepspeed, zorro,
arctic_inference, vllm.max_model_len, ...) and accepts the legacy integration's flat knobs.
The backend is the Arctic server on the local Ray cluster unless trainer.arctic_rl.backend.kind says
otherwise (http, cortex, or reference: the CPU test engine).

  --dry-run   print the resolved core config as `arctic-rl config show` does (config:, then plan:)
              and the settings table; start nothing. Exit 0, or 2 listing every problem.
  --help      this text.
"""

FLAGS = ("--dry-run", "--help", "-h")


def _count_rows(files: Sequence[str]) -> int | None:
    """Rows of the training files (before SkyRL's prompt-length filter); None if any is unreadable."""
    total = 0
    for name in files:
        path = Path(name)
        if not path.is_file():
            return None
        if path.suffix == ".parquet":
            import pyarrow as pa  # noqa: PLC0415 - CLI start-up
            import pyarrow.parquet as pq  # noqa: PLC0415 - CLI start-up

            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except (OSError, pa.ArrowException):
                return None
        elif path.suffix in (".jsonl", ".json"):
            with path.open(encoding="utf-8") as handle:
                total += sum(1 for line in handle if line.strip())
        else:
            return None
    return total


@dataclass
class Checked:
    """Every problem of a launcher's overrides in one round: SkyRL's parse (unknown keys named, the
    rest still checked), the field table, the legacy keys, core validation, SkyRL's registries and
    SkyRL's own `validate_cfg`; the run's config, translation and notices."""

    cfg: Any
    translation: Any
    issues: list[Any] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def check(argv: Sequence[str], config_cls: type | None = None, *, read_data: bool = True) -> Checked:
    """`read_data`: count the training rows for the LR horizon when the files are readable here (the
    dry run); the run leaves that to SkyRL's trainer. Never needed to check the settings."""
    from arctic_rl_core.config import ConfigError  # noqa: PLC0415 - CLI start-up

    from adapter_skyrl.cli_overrides import parse_overrides  # noqa: PLC0415 - CLI start-up
    from adapter_skyrl.config import translate  # noqa: PLC0415 - CLI start-up

    parsed = parse_overrides(argv, config_cls)
    checked = Checked(parsed.cfg, None, list(parsed.issues), list(parsed.notices))
    cfg = parsed.cfg
    if cfg is None:
        return checked
    steps_per_epoch = None
    if read_data:
        rows = _count_rows(list(cfg.data.train_data))
        if rows is not None:
            steps_per_epoch = rows // cfg.trainer.train_batch_size
        else:
            checked.notices.append(
                "data.train_data is not readable here: the LR horizon is counted from it at run time "
                "(trainer.max_training_steps caps it)"
            )
    try:
        result = translate(cfg, steps_per_epoch=steps_per_epoch)
    except ConfigError as error:  # trainer.arctic_rl is not a mapping: nothing more can be read
        checked.issues += error.issues
        return checked
    checked.translation = result
    checked.issues += result.issues
    checked.issues += _validate_cfg_issues(cfg, result.arctic, checked.issues)
    checked.notices += result.notices
    return checked


# A refused SkyRL setting -> the settings as its fix names them, on the copy SkyRL's own validate_cfg
# checks, so that SkyRL names a further problem instead of the same one again.
_LOCAL_ENGINES = (
    ("generator.inference_engine.run_engines_locally", True),
    ("generator.inference_engine.external_proxy_url", None),
    ("generator.inference_engine.external_server_urls", None),
)
_AS_FIXED = {
    "trainer.algorithm.advantage_estimator": (
        ("trainer.algorithm.advantage_estimator", "grpo"),
        ("trainer.critic.model.path", None),
    ),
    "trainer.critic.model.path": (("trainer.critic.model.path", None),),
    "trainer.algorithm.policy_loss_type": (("trainer.algorithm.policy_loss_type", "regular"),),
    "generator.inference_engine.enable_return_routed_experts": (
        ("generator.inference_engine.enable_return_routed_experts", False),
    ),
    "generator.remote_inference_engine_urls": _LOCAL_ENGINES,
    "generator.inference_engine.external_proxy_url": _LOCAL_ENGINES,
    "generator.inference_engine.external_server_urls": _LOCAL_ENGINES,
}


def _validate_cfg_issues(cfg: Any, arctic: Any, reported: Sequence[Any]) -> list[Any]:
    """SkyRL's own `validate_cfg` on the run's config with the refused settings as their fix names
    them, unless its first failure names a setting already reported (the same problem, said once)."""

    from adapter_skyrl.config import skyrl_validation_issues  # noqa: PLC0415 - CLI start-up

    paths = {part.split(" ", 1)[0] for issue in reported for part in issue.path.split(", ")}
    if (
        "trainer.strategy" in paths
    ):  # a Megatron config: its batch shapes are Megatron's, not checkable as FSDP's
        return []
    view = copy.deepcopy(cfg)
    for reported_path in paths & set(_AS_FIXED):
        for path, value in _AS_FIXED[reported_path]:
            parent_path, _, name = path.rpartition(".")
            parent = view
            for part in parent_path.split("."):
                parent = getattr(parent, part)
            setattr(parent, name, value)
    found = skyrl_validation_issues(view, arctic)
    names = {path.rsplit(".", 1)[-1] for path in paths}
    return [issue for issue in found if not any(name in issue.problem for name in names)]


def dry_run(
    argv: Sequence[str], out=None, err=None, *, config_cls: type | None = None, notices: Sequence[str] = ()
) -> int:
    """The dry run: 0 with the document and the settings table on `out`, 2 with every problem on `err`.
    `config_cls`: SkyRL's config class to parse with (default the adapter's; `adapter_skyrl.dapo` its DAPO one)."""
    from arctic_rl_core.config.settings_table import render_settings_table  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.config.show import render_config_document  # noqa: PLC0415 - CLI start-up

    from adapter_skyrl.field_table import FRAMEWORK  # noqa: PLC0415 - CLI start-up

    out = out or sys.stdout
    err = err or sys.stderr
    checked = check(argv, config_cls)
    checked.notices[:0] = notices
    arctic = checked.translation.arctic if checked.translation is not None else None
    if checked.issues or arctic is None:
        count = len(checked.issues)
        err.write(f"{count} problem{'s' if count != 1 else ''} in the SkyRL config for the Arctic path:\n")
        err.writelines(f"  - {issue.render()}\n" for issue in checked.issues)
        err.writelines(f"  notice: {notice}\n" for notice in checked.notices)
        return 2
    out.write(render_config_document(arctic))
    out.write(
        render_settings_table(
            arctic, framework=FRAMEWORK, not_applied=checked.translation.not_applied, notices=checked.notices
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    run_main(list(sys.argv[1:] if argv is None else argv))


def run_main(
    args: list[str],
    *,
    config_cls: type | None = None,
    exp_cls: type | None = None,
    usage: str = USAGE,
    notices: Sequence[str] = (),
) -> None:
    """--help, --dry-run, or the run: SkyRL's config (`config_cls`) on the Arctic path, run by
    `exp_cls` (default `ArcticPPOExp`; `adapter_skyrl.dapo` passes its DAPO config and experiment)."""
    if "--help" in args or "-h" in args:
        sys.stdout.write(usage)
        raise SystemExit(0)
    if "--dry-run" in args:
        raise SystemExit(dry_run([a for a in args if a not in FLAGS], config_cls=config_cls, notices=notices))

    from adapter_skyrl.config import UnsupportedSkyRLSettingError  # noqa: PLC0415 - CLI start-up
    from adapter_skyrl.experiment import ArcticPPOExp  # noqa: PLC0415 - CLI start-up

    # Every problem SkyRL's settings, the legacy keys, the registries and core validation can show
    # without the data.
    checked = check(args, config_cls, read_data=False)
    checked.notices[:0] = notices
    for notice in checked.notices:
        print(f"notice: {notice}", file=sys.stderr)
    if checked.issues or checked.translation is None or checked.translation.arctic is None:
        raise UnsupportedSkyRLSettingError(checked.issues)
    from arctic_rl_core.ray_uv_hook import keep_ray_workers_off_uv_run  # noqa: PLC0415 - CLI start-up

    notice = keep_ray_workers_off_uv_run("adapter_skyrl")  # before SkyRL's ray.init
    if notice:
        print(f"notice: {notice}", file=sys.stderr)
    (exp_cls or ArcticPPOExp)(checked.cfg).run()


RESUME_HINT = "the same command (trainer.resume_mode=latest, the default, resumes from the last checkpoint)"


def cli(entry: Callable[[], None]) -> None:
    """A `python -m` entry point: a refused configuration prints its problems and exits 2; a failure
    a user can cause or meet (a damaged checkpoint, a folder another run holds, the server gone, a
    full disk: `arctic_rl_core.failure_messages`) prints one message and exits 1."""
    from arctic_rl_core.config import ConfigError  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.failure_messages import explain  # noqa: PLC0415 - CLI start-up

    try:
        entry()
    except ConfigError as error:
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as error:
        message = explain(error, resume=RESUME_HINT)
        if message is None:
            raise
        print(f"adapter_skyrl: {message}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    cli(main)

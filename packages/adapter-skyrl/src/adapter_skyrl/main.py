"""Entry point: `python -m adapter_skyrl.main [--dry-run] <SkyRL overrides> trainer.arctic_rl.<group>.<knob>=...`,
or SkyRL's own launcher with `trainer.override_entrypoint=adapter_skyrl.main` (SkyRL calls `main()`
before its strict parse; the argument is stripped here).

The run happens in this process: the backend (the Arctic server's jobs on the local Ray cluster by
default, the reference engine when named) does the GPU work, so SkyRL needs no Ray workers of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

USAGE = """\
usage: python -m adapter_skyrl.main [--dry-run] [--help] <SkyRL overrides> [trainer.arctic_rl.<group>.<knob>=...]
       python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=adapter_skyrl.main [--dry-run] ...

Runs a SkyRL 0.4.0 GRPO recipe on the Arctic RL stack. SkyRL's own fields drive the run (GPUs and
nodes, engines x TP, colocate_all, vLLM knobs, batch sizes, optimizer, loss, KL, seeds, checkpoints);
trainer.arctic_rl.* holds the core groups SkyRL has no field for (backend, deepspeed, zorro,
arctic_inference, vllm.max_model_len, ...) and accepts the seed integration's flat knobs.
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
            import pyarrow as pa
            import pyarrow.parquet as pq

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


def dry_run(argv: Sequence[str], out=None, err=None, *, config_cls: type | None = None) -> int:
    """The dry run: 0 with the document and the settings table on `out`, 2 with every problem on `err`.
    `config_cls`: SkyRL's config class to parse with (default the adapter's; `adapter_skyrl.dapo` its DAPO one)."""
    from arctic_rl_core.config import ConfigError
    from arctic_rl_core.config.settings_table import render_settings_table
    from arctic_rl_core.config.show import render_config_document

    from adapter_skyrl.config import parse_cli_with_notices, skyrl_validation_issues, translate
    from adapter_skyrl.field_table import FRAMEWORK

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        cfg, dropped = parse_cli_with_notices(argv, config_cls)
    except (ValueError, TypeError) as error:  # SkyRL's strict parse (unknown key, bad type)
        err.write(f"1 problem in the SkyRL overrides:\n  - {error}\n")
        return 2
    rows = _count_rows(list(cfg.data.train_data))
    steps_per_epoch = rows // cfg.trainer.train_batch_size if rows is not None else None
    try:
        result = translate(cfg, steps_per_epoch=steps_per_epoch)
    except ConfigError as error:
        err.write(f"{error}\n")
        return 2
    issues = list(result.issues) + skyrl_validation_issues(cfg, result.arctic)
    notices = [*dropped, *result.notices]
    if rows is None:
        notices.append(
            "data.train_data is not readable here: the LR horizon uses trainer.max_training_steps only"
        )
    if issues or result.arctic is None:
        count = len(issues)
        err.write(f"{count} problem{'s' if count != 1 else ''} in the SkyRL config for the Arctic path:\n")
        err.writelines(f"  - {issue.render()}\n" for issue in issues)
        err.writelines(f"  notice: {notice}\n" for notice in notices)
        return 2
    out.write(render_config_document(result.arctic))
    out.write(
        render_settings_table(
            result.arctic, framework=FRAMEWORK, not_applied=result.not_applied, notices=notices
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    run_main(list(sys.argv[1:] if argv is None else argv))


def run_main(
    args: list[str], *, config_cls: type | None = None, exp_cls: type | None = None, usage: str = USAGE
) -> None:
    """--help, --dry-run, or the run: SkyRL's config (`config_cls`) on the Arctic path, run by
    `exp_cls` (default `ArcticPPOExp`; `adapter_skyrl.dapo` passes its DAPO config and experiment)."""
    if "--help" in args or "-h" in args:
        sys.stdout.write(usage)
        raise SystemExit(0)
    if "--dry-run" in args:
        raise SystemExit(dry_run([a for a in args if a not in FLAGS], config_cls=config_cls))

    from adapter_skyrl.config import parse_cli_with_notices, skyrl_validation_issues, translate
    from adapter_skyrl.trainer import ArcticPPOExp

    cfg, dropped = parse_cli_with_notices(args, config_cls)
    for notice in dropped:
        print(f"notice: {notice}", file=sys.stderr)
    # Every problem SkyRL's settings, the seed keys and core validation can show without the data.
    result = translate(cfg, steps_per_epoch=None)
    result.issues += skyrl_validation_issues(cfg, result.arctic)
    result.raise_for_issues()
    from arctic_rl_core.ray_uv_hook import keep_ray_workers_off_uv_run

    notice = keep_ray_workers_off_uv_run("adapter_skyrl")  # before SkyRL's ray.init
    if notice:
        print(f"notice: {notice}", file=sys.stderr)
    (exp_cls or ArcticPPOExp)(cfg).run()


def cli(entry: Callable[[], None]) -> None:
    """A `python -m` entry point: a refused configuration prints its problems and exits 2."""
    from arctic_rl_core.config import ConfigError

    try:
        entry()
    except ConfigError as error:
        print(error, file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    cli(main)

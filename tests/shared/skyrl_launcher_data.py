"""SkyRL's example launchers as recorded data (tests/skyrl/launchers/recorded_commands.json, written by
tests/skyrl/launchers/record_launchers.py): each launcher's Python invocation, its placeholders filled
in, and the one change a user makes, the entry point (`adapter_skyrl.main`, or `adapter_skyrl.dapo` for
SkyRL's DAPO example entry points), run through the adapter's `--dry-run` in process."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

LAUNCHERS = Path(__file__).resolve().parents[1] / "skyrl" / "launchers"
RECORDED: dict[str, list[str]] = json.loads((LAUNCHERS / "recorded_commands.json").read_text())
SOURCES = ("v0.4.0", "head")  # SkyRL's release tag skyrl_train-v0.4.0 and the default branch's HEAD
# What a user gives a launcher's required variables (`${VAR:?}`), recorded as $VAR.
PLACEHOLDER_VALUES = {
    "EXTERNAL_PROXY_URL": "http://127.0.0.1:8000",
    "EXTERNAL_SERVER_URLS": "['http://127.0.0.1:8001']",
    "SYNC_DIR": "s3://my-bucket/skyrl-delta-sync/run",
    "ROLLOUT_SERVER_URLS": "['http://127.0.0.1:18000']",
}
# The README's switch: SkyRL's example entry points that extend SkyRL's config with DAPO's fields ->
# `python -m adapter_skyrl.dapo`; SkyRL's one-step off-policy example -> `python -m
# adapter_skyrl.one_step_async`; every other entry point -> `python -m adapter_skyrl.main`.
DAPO_ENTRY_POINTS = ("main_dapo", "main_dapo_fully_async", "main_tis_dapo", "main_dapo_flashrl")
ONE_STEP_ASYNC_ENTRY_POINTS = ("main_async",)


def stock_launchers() -> list[str]:
    """The recorded example launchers of both sources (the legacy integration's are recorded too, apart)."""
    return sorted(name for name in RECORDED if name.split("/", 1)[0] in SOURCES)


def entry_point(name: str) -> str:
    """The module (or script) the launcher runs."""
    invocation = RECORDED[name]
    return invocation[1] if invocation[0] == "-m" else invocation[0]


def adapter_entry_point(name: str) -> str:
    module = entry_point(name).rsplit(".", 1)[-1]
    if module in DAPO_ENTRY_POINTS:
        return "adapter_skyrl.dapo"
    return "adapter_skyrl.one_step_async" if module in ONE_STEP_ASYNC_ENTRY_POINTS else "adapter_skyrl.main"


def launcher_overrides(name: str, home: Path) -> list[str]:
    """The launcher's overrides, run from `home` (its HOME, and `home/skyrl` the folder it ran in)."""
    invocation = RECORDED[name]
    args = invocation[2:] if invocation[0] == "-m" else invocation[1:]

    def fill(arg: str) -> str:
        arg = arg.replace("$REPO", str(home / "skyrl")).replace("$HOME", str(home))
        return re.sub(r"\$([A-Z_]+)", lambda m: PLACEHOLDER_VALUES[m.group(1)], arg)

    return [fill(arg) for arg in args]


def dry_run_launcher(name: str, home: Path, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """`python -m <adapter entry point> --dry-run <the launcher's overrides> <extra>`, in process."""
    from adapter_skyrl.main import dry_run

    config_cls, notices = None, ()
    if adapter_entry_point(name) == "adapter_skyrl.dapo":
        from adapter_skyrl.dapo import ArcticDAPOConfig as config_cls
    if adapter_entry_point(name) == "adapter_skyrl.one_step_async":
        from adapter_skyrl.one_step_async import SYNCHRONOUS

        notices = (SYNCHRONOUS,)
    out, err = io.StringIO(), io.StringIO()
    args = [*launcher_overrides(name, home), *extra]
    code = dry_run(args, out=out, err=err, config_cls=config_cls, notices=notices)
    return code, out.getvalue(), err.getvalue()


def problem_paths(err: str) -> list[str]:
    """The field of each problem a refused dry run lists (`  - <field> = <value>: ...`)."""
    lines = [line[4:] for line in err.splitlines() if line.startswith("  - ")]
    return [re.split(r" = |: ", line, maxsplit=1)[0].split(" (core ", 1)[0] for line in lines]


def write_training_files(args: list[str], rows: int) -> None:
    """The parquet files a launcher's data.train_data / data.val_data name, `rows` rows each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for arg in args:
        if arg.startswith(("data.train_data=", "data.val_data=")):
            for path in re.findall(r"'([^']+)'", arg.split("=", 1)[1]):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.table({"prompt": ["q"] * rows}), path)

"""Where the demo runs: the framework's isolated, locked CPU environment.

`arctic-rl demo` in an environment that already has the framework (e.g. `.venvs/skyrl/bin/arctic-rl`)
runs the driver in-process. Anywhere else (the light root environment of `uv run arctic-rl demo`)
it re-executes the driver with uv in the framework's environment:

    UV_PROJECT_ENVIRONMENT=<repo>/.venvs/<framework> \\
      uv run --locked --package adapter-<framework> --extra cpu python -m arctic_rl_testbed.demo.run ...

which is the environment `tests/run.sh` creates, so the first demo after a test run installs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from arctic_rl_testbed.demo.drivers import is_registered
from arctic_rl_testbed.demo.process_chain import (
    LAUNCHER_ENV,
    forward_termination,
    launcher_identity,
    watch_parent,
)

DRIVER_MODULE = "arctic_rl_testbed.demo.run"
FRAMEWORK_MODULES = {"skyrl": "skyrl", "verl": "verl"}
ADAPTER_PACKAGES = {"skyrl": "adapter-skyrl", "verl": "adapter-verl"}


class LaunchError(RuntimeError):
    """The demo cannot be started here; the message says what to install or where to run it."""


@dataclass(frozen=True)
class Launch:
    """A command line and the environment variables it adds."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def framework_importable(framework: str) -> bool:
    """The framework and its adapter's demo driver (entry point) are both installed here."""

    return importlib.util.find_spec(FRAMEWORK_MODULES[framework]) is not None and is_registered(framework)


def find_repo_root(start: Path | None = None) -> Path:
    """The uv workspace root: the nearest directory above `start` (default: cwd, then this file)
    holding `uv.lock` and `packages/adapter-skyrl`."""
    candidates = [start or Path.cwd(), Path(__file__).resolve()]
    for origin in candidates:
        for directory in (origin, *origin.parents):
            if (directory / "uv.lock").is_file() and (directory / "packages" / "adapter-skyrl").is_dir():
                return directory
    raise LaunchError(
        "cannot find the repository root (uv.lock + packages/adapter-skyrl) above "
        f"{candidates[0]}: run `arctic-rl demo` from a clone of the repository"
    )


def find_uv() -> list[str]:
    """The uv command: the one running us (`uv run` sets `UV`), else `uv` on PATH, else
    `python -m uv` when the uv package is installed."""
    running = os.environ.get("UV")
    if running and Path(running).is_file():
        return [running]
    found = shutil.which("uv")
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    raise LaunchError(
        "uv is not installed: the demo runs in the framework's locked environment, which uv builds. "
        "Install it (`pip install uv`, see https://docs.astral.sh/uv/) and run `uv run arctic-rl demo`"
    )


def uv_launch(framework: str, driver_args: Sequence[str], repo_root: Path, uv: Sequence[str]) -> Launch:
    """The re-exec of the driver in the framework's locked CPU environment."""
    if framework not in ADAPTER_PACKAGES:
        raise LaunchError(f"framework={framework!r}: expected one of {sorted(ADAPTER_PACKAGES)}")
    argv = [
        *uv,
        "run",
        "--locked",
        "--package",
        ADAPTER_PACKAGES[framework],
        "--extra",
        "cpu",
        "python",
        "-m",
        DRIVER_MODULE,
        *driver_args,
    ]
    env = {"UV_PROJECT_ENVIRONMENT": str(repo_root / ".venvs" / framework)}
    return Launch(argv=argv, env=env, cwd=repo_root)


def driver_args(
    *,
    framework: str,
    task: str | None,
    steps: int | None,
    out: str | None,
    resume: str | None,
    extra: Mapping[str, object] | None = None,
) -> list[str]:
    """The driver's flags; relative paths are made absolute (the re-exec runs in the repo root)."""
    args = ["--framework", framework]
    if task is not None:
        args += ["--task", task]
    if steps is not None:
        args += ["--steps", str(steps)]
    if out is not None:
        args += ["--out", str(Path(out).resolve())]
    if resume is not None:
        args += ["--resume", str(Path(resume).resolve())]
    for flag, value in (extra or {}).items():
        if value is True:  # a switch (e.g. --colocate)
            args.append(flag)
        elif value is not None and value is not False:
            args += [flag, str(value)]
    return args


def run_launch(launch: Launch) -> int:
    """Run the re-exec, forwarding Ctrl-C to it (the driver checkpoints and exits 130), and SIGTERM /
    SIGHUP; when this process's parent dies (the outer `uv run` SIGKILLed) the child is stopped, and
    the driver stops when this process dies (`process_chain`): no driver outlives its launcher."""

    # the caller's own virtual environment (the root `.venv` of `uv run`) is not the target one
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"} | launch.env
    env[LAUNCHER_ENV] = launcher_identity()
    process = subprocess.Popen(launch.argv, env=env, cwd=launch.cwd)
    with forward_termination(process):
        watch_parent(process)
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue  # the child got the same SIGINT from the terminal; wait for it to finish

"""Ray's `uv run` runtime-env hook as a driver under `uv run` meets it (shared by tests/core and
tests/verl): `as_if_under_uv_run` makes this process look like one that `uv run CMD...` started, with
Ray's default (hook on); `worker_python` is the Python Ray would start each worker with."""

from __future__ import annotations

from collections.abc import Sequence

HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


def as_if_under_uv_run(monkeypatch, cmdline: Sequence[str]) -> None:
    from ray._private import ray_constants
    from ray._private.runtime_env import uv_runtime_env_hook

    monkeypatch.setattr(uv_runtime_env_hook, "_get_uv_run_cmdline", lambda: list(cmdline))
    monkeypatch.setattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", True)
    monkeypatch.setenv(HOOK_ENV, "placeholder")  # recorded: restored after the test
    monkeypatch.delenv(HOOK_ENV)


def worker_python(runtime_env: dict) -> str | None:
    """`py_executable` of the runtime env `ray.init(runtime_env=...)` would hand every worker."""
    from ray._private import worker

    return worker._maybe_modify_runtime_env(dict(runtime_env), False).get("py_executable")

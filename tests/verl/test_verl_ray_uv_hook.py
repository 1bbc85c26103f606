"""verl 0.9.1 under `uv run`: verl hands `ray.init` a runtime env with `working_dir=None`, which
Ray's uv-run hook rejects; `adapter_verl.main.keep_ray_off_uv_run` turns the hook off before verl
starts Ray (every recipe and `uv run arctic-rl demo --framework verl` run under uv run)."""

from __future__ import annotations

import pytest
from adapter_verl import main as verl_main
from ray._private import ray_constants, worker
from ray_uv_hook_checks import as_if_under_uv_run
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env


@pytest.fixture
def under_uv_run(monkeypatch):
    """As if the driver's parent were `uv run python -m adapter_verl.main`, with Ray's default hook."""
    as_if_under_uv_run(monkeypatch, ["uv", "run", "python", "-m", "adapter_verl.main"])


def test_ray_rejects_verls_runtime_env_under_uv_run(under_uv_run):
    runtime_env = get_ppo_ray_runtime_env()
    assert runtime_env["working_dir"] is None  # what verl passes without a Ray job config
    with pytest.raises(TypeError, match="path_or_uri must be a string"):
        worker._maybe_modify_runtime_env(runtime_env, False)


def test_the_adapter_turns_the_hook_off_and_says_so(under_uv_run, monkeypatch):
    notice = verl_main.keep_ray_off_uv_run()
    assert "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" in notice
    assert verl_main.os.environ[verl_main.RAY_UV_HOOK_ENV] == "0"
    assert ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV is False  # Ray was imported before the call
    runtime_env = get_ppo_ray_runtime_env()
    assert worker._maybe_modify_runtime_env(runtime_env, False) == runtime_env  # passed through as is


def test_an_explicit_setting_is_respected_or_refused_with_the_reason(under_uv_run, monkeypatch):
    monkeypatch.setenv(verl_main.RAY_UV_HOOK_ENV, "0")
    assert verl_main.keep_ray_off_uv_run() is None
    monkeypatch.setenv(verl_main.RAY_UV_HOOK_ENV, "1")
    with pytest.raises(SystemExit, match="working_dir=None, which Ray's uv-run hook rejects"):
        verl_main.keep_ray_off_uv_run()

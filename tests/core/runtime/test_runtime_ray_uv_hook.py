"""Ray's `uv run` hook, off for Arctic RL runs (issue 28): under a recipe's `uv run --isolated ...`
Ray would start every worker (the Arctic server's actors included) with that command, each one
installing its own environment. `arctic_rl_core.ray_uv_hook` (called by adapter_skyrl.main before
SkyRL's `ray.init`; adapter_verl has its own, see tests/verl/test_verl_ray_uv_hook.py) and the
recipes' `_launcher.sh` turn it off; a value the user set is kept."""

from __future__ import annotations

import pytest
from arctic_rl_core import ray_uv_hook
from ray._private import ray_constants
from ray_uv_hook_checks import HOOK_ENV, as_if_under_uv_run, worker_python

RECIPE_DRIVER = ["uv", "run", "--isolated", "--locked", "--package", "adapter-skyrl", "--extra", "gpu"]


@pytest.fixture
def under_uv_run(monkeypatch):
    as_if_under_uv_run(monkeypatch, [*RECIPE_DRIVER, "python", "-m", "adapter_skyrl.main"])


def test_under_uv_run_every_ray_worker_would_run_the_drivers_uv_command(under_uv_run):
    python = worker_python({"env_vars": {"X": "1"}})  # SkyRL's ray.init(runtime_env={"env_vars": ...})
    assert python is not None and python.split()[:8] == RECIPE_DRIVER


def test_the_core_turns_the_hook_off_and_says_so(under_uv_run):
    import os

    notice = ray_uv_hook.keep_ray_workers_off_uv_run("adapter_skyrl")
    assert notice.startswith(f"adapter_skyrl: {HOOK_ENV}=0") and "install its own environment" in notice
    assert os.environ[HOOK_ENV] == "0"  # inherited by a launched server and a Ray this process starts
    assert ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV is False  # Ray was imported before the call
    assert worker_python({"env_vars": {"X": "1"}}) is None  # workers run the cluster's Python


@pytest.mark.parametrize("value", ["0", "1"])
def test_a_value_the_user_set_is_kept(under_uv_run, monkeypatch, value):
    import os

    monkeypatch.setenv(HOOK_ENV, value)
    assert ray_uv_hook.keep_ray_workers_off_uv_run("adapter_skyrl") is None
    assert os.environ[HOOK_ENV] == value

"""Ray's `uv run` runtime-env hook, turned off for Arctic RL runs.

Ray detects a driver started by `uv run` (every recipe launcher, the README's `uv run --isolated
--with ...` lines) and gives every Ray worker the driver's `uv run ...` command as its Python
(`py_executable`, `ray/_private/runtime_env/uv_runtime_env_hook.py`): each worker process, the Arctic
server's state actor, DeepSpeed workers and vLLM engines included, then resolves and installs its
own environment before it starts (with `--isolated`, a fresh temporary one each time). With
`RAY_ENABLE_UV_RUN_RUNTIME_ENV=0` workers run the cluster's Python: the driver's for a Ray it starts,
the one `ray start` ran from on a cluster (start it from the locked environment). Ray reads the
variable once, when it is imported: an already imported Ray gets its constant set too.
"""

from __future__ import annotations

import os
import sys

HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
RAY_CONSTANTS_MODULE = "ray._private.ray_constants"


def keep_ray_workers_off_uv_run(who: str) -> str | None:
    """Turn the hook off for this process and the processes it starts (a Ray it starts, a server it
    launches); returns the notice to print, or None when `RAY_ENABLE_UV_RUN_RUNTIME_ENV` is already
    set (the user's choice is kept)."""
    if os.environ.get(HOOK_ENV) is not None:
        return None
    os.environ[HOOK_ENV] = "0"
    constants = sys.modules.get(RAY_CONSTANTS_MODULE)
    if constants is not None:
        constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    return (
        f"{who}: {HOOK_ENV}=0 (under `uv run`, Ray's uv hook would make every Ray worker, the Arctic server's "
        "included, install its own environment with the driver's `uv run` command; workers run the "
        "cluster's Python)"
    )

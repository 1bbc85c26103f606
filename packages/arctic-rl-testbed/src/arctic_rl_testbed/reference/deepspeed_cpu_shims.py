"""What arctic-platform 0.1.4's `DeepSpeedWorker` needs to run on a CPU: the only module that bends
anything of the real server's code, each shim with why it is needed. Nothing of arctic-platform is
copied or forked: the worker, its pipeline, losses, DeepSpeed engine and checkpoint code run as
shipped; these shims only stand in for the GPU the code assumes.

Applied inside the worker's own process (`deepspeed_worker_process`), before arctic-platform or
DeepSpeed is imported there:

- `WORKER_ENV` (environment of the worker process):
  - `DS_ACCELERATOR=cpu`: DeepSpeed picks its accelerator when first used. On a machine with no GPU it
    falls back to the CPU accelerator by itself (with a warning); with a GPU visible it would pick CUDA,
    and this test double must train on the CPU wherever it runs.
  - `CUDA_VISIBLE_DEVICES=""`: the worker process sees no GPU, so the `torch.cuda` stubs below never
    hide a real device and nothing is allocated on one.
  - DeepSpeed's CPU accelerator then talks over gloo (it uses oneCCL only when
    `oneccl_bindings_for_pytorch` is installed, which nothing here installs): no shim needed for the
    process group; the tests check the backend is gloo.
- `install()` (patches, idempotent):
  - `deepspeed.comm.torch.build_shm_op` -> returns None. DeepSpeed's CPU accelerator JIT-compiles a
    shared-memory all-reduce kernel (`deepspeed_shm_comm`) when the process group starts: ~230 s of
    C++ on a 2-core machine, a compiler requirement, and a file lock in ~/.cache/torch_extensions that
    a killed build leaves behind, hanging every later start. With None, DeepSpeed uses plain
    torch.distributed (gloo) collectives, which is what its own code does when the op is unavailable.
  - `torch.cuda.current_device` -> 0 and `torch.cuda.get_device_properties` -> an object whose `uuid`
    is "cpu": `DeepSpeedWorker.initialize` logs the GPU's index and UUID after `deepspeed.initialize`
    (and the CUDA-IPC weight-sync paths key handles by it); without a GPU both raise.
  - `torch.cuda.synchronize` -> no-op: the worker's offload/reload (sleep/wake training) and its
    weight-gather paths synchronise the GPU stream; without a GPU it raises.
  - `arctic_platform._dependency_groups.require_any_dep_group` -> no-op: `arctic_platform.model` (which
    the worker imports) refuses to import unless every distribution of the `sft` or `rl` extra is
    installed (fastapi, uvicorn, liger-kernel, nvidia-ml-py, tensordict, and with `rl` arctic-inference
    and vLLM), although the worker imports none of them on this path (no Liger, no vLLM). It checks
    installed metadata by name, so a CPU environment without the GPU stack would need them all.

One change to what a client asks for, in `cpu_ds_config` (applied to every job's `ds_config` by
`deepspeed_server_jobs` before the server's `/initialize` sees it):
  - `optimizer.params.torch_adam = true` when the client left it unset: on DeepSpeed's CPU accelerator
    its Adam/AdamW (fused, or the ZeRO-offload CPU Adam) is a C++ op it JIT-compiles at
    `deepspeed.initialize` (several minutes of gcc on 2 cores; a killed build leaves a lock file that
    hangs the next start, as above). `torch_adam` makes DeepSpeed use `torch.optim.AdamW`: the same
    update with the same hyper-parameters. On a GPU node the same flag avoids the CUDA build (issue 28
    item 3); the server logs what it added.

In the process that runs the server's own code (`deepspeed_server_jobs`), only `extras_gate_open()`:
the same gate, opened while `arctic_platform.common.http_server` is imported (it imports the worker
module, hence `arctic_platform.model`) and while one of its routes runs (the load balancer imports
`arctic_platform.rl` on first use), and closed again, so a client in the same process keeps its own
check (`make_transport` refuses the on-prem transports without those extras) outside those calls.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
from collections.abc import Iterator
from typing import Any

WORKER_ENV: dict[str, str] = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}

_installed = False


class _CpuDeviceProperties:
    """What the worker reads of `torch.cuda.get_device_properties(...)`: the device UUID (for logs and
    CUDA-IPC handle keys)."""

    name = "cpu"
    uuid = "cpu"
    total_memory = 0


def install() -> None:
    """Apply the patches above (idempotent). Call in the worker's process only, after `WORKER_ENV` is
    in `os.environ` and before `arctic_platform.common.deepspeed_worker` is imported."""
    global _installed
    if _installed:
        return

    import torch

    # `import deepspeed.comm.torch` would bind the torch package itself: deepspeed.comm re-exports
    # the name `torch` from its own modules. The module object is the one to patch.
    ds_comm_torch = importlib.import_module("deepspeed.comm.torch")
    ds_comm_torch.build_shm_op = _no_shm_op
    torch.cuda.current_device = _current_device
    torch.cuda.get_device_properties = _device_properties
    torch.cuda.synchronize = _synchronize
    dependency_groups = importlib.import_module("arctic_platform._dependency_groups")
    dependency_groups.require_any_dep_group = _require_nothing
    _installed = True


def cpu_ds_config(ds_config: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """A copy of `ds_config` with `optimizer.params.torch_adam` set when it is unset (see above), and the
    dotted keys that were added."""

    if not ds_config or not isinstance(ds_config.get("optimizer"), dict):
        return ds_config, []
    config = copy.deepcopy(ds_config)
    params = config["optimizer"].setdefault("params", {})
    if "torch_adam" in params:
        return config, []
    params["torch_adam"] = True
    return config, ["optimizer.params.torch_adam"]


@contextlib.contextmanager
def extras_gate_open() -> Iterator[None]:
    """`require_any_dep_group` is a no-op inside the block: in `arctic_platform._dependency_groups` and in
    every arctic-platform module already loaded that imported it by name (`client.base` checks it in
    `make_transport`, the server modules at import), restored on the way out."""

    dependency_groups = importlib.import_module("arctic_platform._dependency_groups")
    gate = dependency_groups.require_any_dep_group
    bound = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("arctic_platform.") and getattr(module, "require_any_dep_group", None) is gate
    ]
    for module in bound:
        module.require_any_dep_group = _require_nothing
    try:
        yield
    finally:
        for module in bound:
            module.require_any_dep_group = gate


def _no_shm_op() -> None:
    return None


def _current_device() -> int:
    return 0


def _device_properties(*_args: Any, **_kwargs: Any) -> _CpuDeviceProperties:
    return _CpuDeviceProperties()


def _synchronize(*_args: Any, **_kwargs: Any) -> None:
    return None


def _require_nothing(*_extras: str) -> None:
    return None

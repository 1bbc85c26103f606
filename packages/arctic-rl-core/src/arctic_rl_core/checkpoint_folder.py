"""Where a framework run keeps the backend's checkpoints, and how many.

Both adapters save the backend's checkpoints into one folder per run, beside the framework's own
`global_step_<n>` folders: `<run dir>/arctic_backend/checkpoint-<step>`. The Arctic server (0.1.4
`save(path, step, save_total_limit)`) writes `<path>/checkpoint-<step>` and then keeps the newest
`save_total_limit` `checkpoint-*` children of `<path>`, so with one folder per run the framework's
"checkpoints kept" (SkyRL `trainer.max_ckpts_to_keep`, verl `trainer.max_actor_ckpt_to_keep`) is
`checkpoint.save_total_limit`, and it is enforced where the checkpoints are written: on the server's
filesystem, which the framework's own cleanup cannot reach when the server runs elsewhere.
"""

from __future__ import annotations

import os
import re

BACKEND_FOLDER = "arctic_backend"
"""The backend's checkpoints of one run: `<run dir>/arctic_backend/checkpoint-<step>`."""

_STEP = re.compile(r"global_step_(\d+)")


def _step_folder(framework_path: str) -> str:
    """The innermost `global_step_<n>` component of `framework_path` (the path up to it)."""
    path = os.path.normpath(str(framework_path))
    while path and path != os.path.dirname(path):
        if _STEP.fullmatch(os.path.basename(path)):
            return path
        path = os.path.dirname(path)
    raise ValueError(
        f"checkpoint path {str(framework_path)!r} has no global_step_<n>: cannot tell the step it holds"
    )


def step_of(framework_path: str) -> int:
    """The step a framework checkpoint path names (`<run dir>/global_step_<n>[/<role>]`)."""
    return int(_STEP.fullmatch(os.path.basename(_step_folder(framework_path))).group(1))


def backend_checkpoint_root(framework_path: str) -> str:
    """`<run dir>/global_step_<n>[/<role>]` -> `<run dir>/arctic_backend`, the folder whose
    `checkpoint-<n>` children the server saves and prunes."""
    return os.path.join(os.path.dirname(_step_folder(framework_path)), BACKEND_FOLDER)


def backend_checkpoint_dir(framework_path: str, step: int) -> str:
    """Where the server writes the checkpoint of `step` (0.1.4's `<path>/checkpoint-<step>`)."""
    return os.path.join(backend_checkpoint_root(framework_path), f"checkpoint-{int(step)}")

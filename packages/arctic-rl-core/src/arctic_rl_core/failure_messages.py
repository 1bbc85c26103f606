"""What a run says when it stops for a reason a user can cause or meet: one message with the cause,
the file or field, and the fix, never a traceback (the demo and both adapters' entry points print it;
the traceback goes to a log).

`explain(error, resume=...)` knows: a damaged or missing checkpoint file, a run folder another run
holds, another run's jobs on the server, the server gone, timing out or failing mid-run, a full
disk, a refused configuration, a framework's save that failed otherwise (also the backend's save of the step,
before the server error it carries). It looks through the causes a framework wraps
an error in (Ray's `RayTaskError.cause`, `raise ... from`); None for anything else (a bug: the
traceback is shown). `resume` is the command that continues the run, for the messages that end
with it.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

from arctic_rl_core.backends.arctic_errors import ArcticCallError
from arctic_rl_core.backends.arctic_leftovers import ArcticServerBusy
from arctic_rl_core.checkpoint_manifest import BackendSaveFailed, CheckpointDamaged, StepSaveFailed
from arctic_rl_core.config.errors import ConfigError
from arctic_rl_core.run_lock import RunFolderBusy


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen or len(seen) > 16:
            continue
        seen.add(id(current))
        yield current
        pending += [getattr(current, "cause", None), current.__cause__, current.__context__]


def explain(error: BaseException, *, resume: str, run_dir: Path | None = None) -> str | None:
    """The one message for `error`, or None when it is not a failure this module explains."""

    folder = f" {run_dir}" if run_dir is not None else ""
    for cause in _causes(error):
        if isinstance(cause, CheckpointDamaged):
            return f"cannot resume{folder}: {cause}"
        if isinstance(cause, StepSaveFailed) and isinstance(cause.cause, BackendSaveFailed):
            return f"{cause} with: {resume}"  # the server's answer, the step and its partial folder
        if isinstance(cause, (RunFolderBusy, ArcticServerBusy, ConfigError)):
            return str(cause)
        if isinstance(cause, ArcticCallError):
            kept = f"; its checkpoints are in{folder}" if folder else " at its last checkpoint"
            return f"{cause}\nThe run stopped{kept}. Once the server answers again, continue with: {resume}"
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            where = cause.filename or getattr(cause, "directory", None) or run_dir
            return (
                f"the disk is full: writing {where} failed ({cause}). Nothing of the interrupted save is used: "
                f"free space on that disk, then continue with: {resume}"
            )
    for cause in _causes(error):  # a failed save whose cause is none of the above
        if isinstance(cause, StepSaveFailed):
            return f"{cause} with: {resume}"
    return None

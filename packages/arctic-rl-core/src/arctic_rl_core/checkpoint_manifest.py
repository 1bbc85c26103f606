"""What a framework checkpoint held when it was saved, checked before a resume uses any of it.

Both adapters write `arctic_manifest.json` into each framework step folder (`global_step_<n>`) as
the last act of its save: every file under it with its size and SHA-256. A resume first checks the
run's checkpoint folder (`check_resume_point`): the framework's record of its latest step is there
and names a step folder that exists, and every file of that folder is whole (`verify`). Anything
else stops the resume with `CheckpointDamaged`, which names the file and what to do, instead of the
frameworks' own behaviour (SkyRL 0.4.0 restarts at step 1 without its latest-step file, and
continues on different data after a warning when `data.pt` is truncated).

`python -m arctic_rl_core.checkpoint_manifest DIR` writes the manifest of a step folder whose files
you know to be whole (one saved before manifests existed).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "arctic_manifest.json"
STEP_PREFIX = "global_step_"
FORMAT = "arctic-rl-checkpoint-manifest/1"
_STEP = re.compile(rf"{STEP_PREFIX}(\d+)")


class CheckpointDamaged(RuntimeError):
    """A checkpoint file is missing or not what was saved; the message names it and the fix."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}. {fix}")
        self.path, self.problem, self.fix = Path(path), problem, fix


def file_record(path: Path) -> dict[str, object]:
    """`{"bytes", "sha256"}` of a file, what a save records of it."""
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return {"bytes": path.stat().st_size, "sha256": sha.hexdigest()}


def check_file(path: Path, saved: dict[str, object], fix: str, *, listed_in: str) -> None:
    """CheckpointDamaged unless `path` is there with the size and digest its save recorded
    (`saved`, a `file_record`); `listed_in` names the record that lists it."""
    if not path.is_file():
        raise CheckpointDamaged(path, f"missing ({listed_in} lists it)", fix)
    size = int(saved["bytes"])
    actual = path.stat().st_size
    if actual != size:
        raise CheckpointDamaged(
            path, f"{actual:,} bytes, but {size:,} were saved (truncated or overwritten)", fix
        )
    if file_record(path)["sha256"] != saved["sha256"]:
        raise CheckpointDamaged(path, "its contents differ from what was saved (SHA-256)", fix)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: str | Path) -> dict[str, dict[str, object]]:
    """Record every file under `folder` (size, SHA-256) in `folder/arctic_manifest.json`, written
    atomically (a reader sees no manifest or the whole one); returns the file table."""
    folder = Path(folder)
    files = {str(p.relative_to(folder)): file_record(p) for p in _files(folder)}
    write_text_atomic(
        folder / MANIFEST, json.dumps({"format": FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
    )
    return files


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename: a reader sees the old text or the new, whole (also
    after a crash: the file and its folder are synced)."""
    temporary = path.with_name(f".{path.stem}.{time.time_ns():x}-{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def verify(folder: str | Path, *, earlier: str = "") -> None:
    """CheckpointDamaged unless every file the manifest of `folder` lists is there, of its size and
    digest. `earlier`: what to do instead (e.g. resume from the previous step), added to the fix."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    instead = f" {earlier}" if earlier else ""
    if not manifest.is_file():
        raise CheckpointDamaged(
            manifest,
            "missing: the save of this checkpoint did not finish (or it was saved by a version without manifests)",
            f"If you know its files are whole, write it with `python -m arctic_rl_core.checkpoint_manifest "
            f"{folder}`.{instead}",
        )
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        entries = [
            (name, {"bytes": int(e["bytes"]), "sha256": str(e["sha256"])}) for name, e in files.items()
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointDamaged(
            manifest, f"unreadable ({type(error).__name__}: {error})", f"Restore it from a copy.{instead}"
        ) from None
    for name, saved in entries:
        check_file(
            folder / name, saved, f"Restore it from a copy.{instead}", listed_in="the checkpoint's manifest"
        )


@dataclass(frozen=True)
class CheckpointFolder:
    """A framework's checkpoint folder: `root/<latest_file>` names the latest `global_step_<n>`."""

    root: Path
    latest_file: str  # SkyRL: latest_ckpt_global_step.txt; verl: latest_checkpointed_iteration.txt

    @property
    def latest(self) -> Path:
        return self.root / self.latest_file

    def step_folder(self, step: int) -> Path:
        return self.root / f"{STEP_PREFIX}{step}"

    def steps(self) -> list[int]:
        """The steps of the `global_step_<n>` folders there, ascending."""
        if not self.root.is_dir():
            return []
        found = (_STEP.fullmatch(p.name) for p in self.root.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def whole_steps(self, below: int | None = None) -> list[int]:
        """The steps (below `below`) whose folder passes `verify`, ascending."""
        whole = []
        for step in self.steps():
            if below is not None and step >= below:
                continue
            try:
                verify(self.step_folder(step))
            except CheckpointDamaged:
                continue
            whole.append(step)
        return whole

    def _instead(self, below: int | None) -> str:
        """The fix that falls back to the newest whole step (below `below`), or to a new run."""
        whole = self.whole_steps(below)
        if whole:
            return (
                f"Or resume from step {whole[-1]} (its files are whole): `echo {whole[-1]} > {self.latest}`."
            )
        return f"Or start over: move {self.root} away."

    def rewind_to(self, step: int | None) -> list[int]:
        """Make `step` the latest checkpoint (None: no checkpoint, a new run): the latest-step file
        names it (removed for None) and the step folders after it are removed; returns their steps."""
        if step is None:
            self.latest.unlink(missing_ok=True)
        else:
            write_text_atomic(self.latest, f"{step}")
        removed = [s for s in self.steps() if step is None or s > step]
        for later in removed:
            folder = self.step_folder(later)
            aside = folder.with_name(f".{folder.name}.removing-{os.getpid()}")
            os.replace(folder, aside)  # gone at once; then deleted
            shutil.rmtree(aside, ignore_errors=True)
        return removed

    def resume_point(self) -> int | None:
        """The step a resume starts after, with every file of its checkpoint checked; None for a
        folder with no checkpoint (a new run). CheckpointDamaged otherwise."""
        if not self.latest.is_file():
            steps = self.steps()
            if not steps:
                return None
            whole = self.whole_steps()
            fix = (
                f"Restore it: `echo {whole[-1]} > {self.latest}` (step {whole[-1]} is the newest whole checkpoint)"
                if whole
                else "No checkpoint there is whole"
            )
            raise CheckpointDamaged(
                self.latest,
                f"missing, but {self.root} holds checkpoints of steps {', '.join(map(str, steps))}: the run would "
                "silently start again at step 1",
                f"{fix}; or start over: move {self.root} away.",
            )
        text = self.latest.read_text(encoding="utf-8", errors="replace").strip()
        if not text.isdigit():
            raise CheckpointDamaged(
                self.latest,
                f"holds {text[:40]!r}, not a step number",
                f"Write the step to resume from into it. {self._instead(None)}",
            )
        step = int(text)
        folder = self.step_folder(step)
        if not folder.is_dir():
            raise CheckpointDamaged(
                folder, f"missing, but {self.latest.name} names step {step}", self._instead(step)
            )
        verify(folder, earlier=self._instead(step))
        return step


_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how safetensors' writer reports the errno


def write_errno(error: BaseException) -> int | None:
    """The errno of a failed write: an OSError's, or the one safetensors' writer names in its text;
    None when the writer hid it (torch.save's RuntimeError: "unexpected pos", "failed writing")."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno
    match = _OS_ERROR.search(str(error))
    return int(match.group(1)) if match else None


def disk_full(error: BaseException, folder: Path) -> bool:
    """A failed write met a full disk or quota: its errno says so, or (torch.save hides the errno)
    the file system holding `folder` has under 1 MiB left for this user, checked before anything of
    the save is removed."""
    if write_errno(error) in (errno.ENOSPC, errno.EDQUOT):
        return True
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    try:
        stats = os.statvfs(existing) if existing is not None else None
    except OSError:
        return False
    return stats is not None and stats.f_bavail * stats.f_frsize < (1 << 20)


class BackendSaveFailed(RuntimeError):
    """The backend's own save of a step (the Arctic server's `/save`) failed. A server's failed save may
    leave a partial `checkpoint-<step>` on its disk (arctic-platform 0.1.4's does: DeepSpeed's files as far
    as they got, and a 400/500), which this client cannot delete there: no marker or latest-step file
    names that step, so a resume loads the last whole step's checkpoint, and saving the step again
    writes over it. `folder` is that `checkpoint-<step>`; pickles whole (a Ray worker raises it)."""

    def __init__(self, message: str, folder: str | Path, step: int) -> None:
        super().__init__(message)
        self.folder, self.step = Path(folder), int(step)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), str(self.folder), self.step))

    @classmethod
    def of(cls, root: str | Path, step: int, cause: BaseException) -> BackendSaveFailed:
        """`step`: the backend's own step count (its optimizer steps), which names its checkpoint folder."""
        folder = Path(root) / f"checkpoint-{int(step)}"
        return cls(
            f"the backend's save of {folder} failed ({type(cause).__name__}: {cause}). The server may have left "
            f"that folder partial on its disk, which this client cannot delete there: no checkpoint marker names "
            f"it, a resume loads the last whole checkpoint, and the next save of checkpoint-{int(step)} writes "
            "over it",
            folder,
            step,
        )


@contextmanager
def backend_save(root: str | Path, step: int) -> Iterator[None]:
    """Around an adapter's call of the backend's `save_checkpoint(root, step)`: an Exception comes out
    as `BackendSaveFailed` naming the folder the server may have left partial."""
    try:
        yield
    except Exception as error:
        raise BackendSaveFailed.of(root, step, error) from error


class StepSaveFailed(RuntimeError):
    """A framework's save of a step folder failed; nothing of it was kept. The message names the
    folder, the cause and the fix (`failure_messages` adds the command that continues the run)."""

    def __init__(self, folder: Path, cause: BaseException, *, full: bool) -> None:
        reason = "the disk is full (or over its quota)" if full else f"{type(cause).__name__}: {cause}"
        fix = (
            "free space on that disk (fewer checkpoints kept: the framework's max_ckpts_to_keep), then continue"
            if full
            else "if the disk is full or over its quota, free space; then continue"
        )
        kept = "Nothing of it was kept"
        if isinstance(cause, BackendSaveFailed):  # (a Ray worker's error is also an instance of its cause)
            kept = f"Nothing of {folder.name} was kept here"
            fix = "the server's log says why its save failed (a full disk: free space there); then continue"
        super().__init__(
            f"saving the checkpoint {folder} failed: {reason}. {kept} (the latest-step file names the last "
            f"whole checkpoint). Fix: {fix}"
        )
        self.folder, self.cause, self.disk_full = folder, cause, full


def save_failed(checkpoints: CheckpointFolder, folder: Path, error: BaseException) -> StepSaveFailed:
    """What an adapter raises when its framework's save of `folder` failed with `error`: the disk
    checked, then the unfinished step folder removed (`discard_unfinished`)."""
    full = disk_full(error, folder)
    discard_unfinished(checkpoints, folder)
    return StepSaveFailed(folder, error, full=full)


@contextmanager
def step_save(checkpoints: CheckpointFolder, step_folder: Path) -> Iterator[None]:
    """Around an adapter's save of `step_folder` (its framework's save, then the manifest): any
    failure removes the unfinished folder; an Exception comes out as `StepSaveFailed` (`save_failed`),
    a Ctrl-C as itself."""
    try:
        yield
    except Exception as error:
        raise save_failed(checkpoints, step_folder, error) from error
    except BaseException:
        discard_unfinished(checkpoints, step_folder)
        raise


def discard_unfinished(checkpoints: CheckpointFolder, folder: Path) -> bool:
    """Remove a step folder whose save failed (a full disk), unless the latest-step file names it;
    True when removed. Called by the adapters' saves before they re-raise."""
    latest = (
        checkpoints.latest.read_text(encoding="utf-8", errors="replace").strip()
        if checkpoints.latest.is_file()
        else ""
    )
    if not folder.is_dir() or latest == str(step_of(folder)):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def step_of(folder: str | Path) -> int | None:
    """The n of a `global_step_<n>` folder; None for another name."""
    match = _STEP.fullmatch(Path(folder).name)
    return int(match.group(1)) if match else None


if __name__ == "__main__":
    for argument in sys.argv[1:] or ["--help"]:
        if argument in ("-h", "--help"):
            print(__doc__)
            break
        written = write_manifest(argument)
        print(f"{Path(argument) / MANIFEST}: {len(written)} files")

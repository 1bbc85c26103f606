"""Checkpoint files of the reference trainer: weights (safetensors), AdamW state, the schedule
position and step, and the RNG states (trainer dropout RNG, sampler RNG), so that a resumed run is
bit-identical to an uninterrupted one. Nothing is pickled except the optimizer state dict, which is
read back with `torch.load(weights_only=True)`.

Saves are atomic: a process killed at any point of a save leaves the checkpoint wholly old or
wholly new, never step-5 weights with step-4 optimizer state. The data files of one save carry
that save's generation in their names and are written (and fsynced) first; the state file, which
names them, is then renamed over the old one: that rename is the commit. The old generation's
files are removed afterwards (a kill before that leaves unreferenced files that the next save
removes). This works the same for a `checkpoint-N` folder and for a job's root folder (a save
without a step), which also holds other things and so cannot be swapped whole. `write_text_atomic`
and `remove_tree_atomic` give the server's `latest` pointer and pruning the same property.

A save that cannot be written (a full disk) removes what it wrote and raises `CheckpointWriteError`
(the previous checkpoint stays, nothing partial fills the disk). The state file records each data
file's size and SHA-256; a load checks them before it uses anything and names the damaged file
(`checkpoint_manifest.CheckpointDamaged`).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.checkpoint_manifest import (
    CheckpointDamaged,
    check_file,
    file_record,
    write_errno,
    write_text_atomic,
)

if TYPE_CHECKING:
    import torch

FORMAT = "arctic-rl-reference-checkpoint/2"
READABLE_FORMATS = ("arctic-rl-reference-checkpoint/1", FORMAT)
# Format 1 (fixed names, written in place) is still read.
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.safetensors"
STATE_FILE = "trainer_state.json"
# The data files of one save: (role, stem, suffix) -> "{stem}.{generation}{suffix}".
_DATA_FILES = (
    ("weights", "model", ".safetensors"),
    ("optimizer", "optimizer", ".pt"),
    ("rng", "rng", ".safetensors"),
)
_OURS = re.compile(
    r"^(?:model|optimizer|rng)(?:\.[0-9a-f]+-\d+)?\.(?:safetensors|pt)$|^\.trainer_state\..+\.tmp$"
)


@dataclass(frozen=True)
class TrainerState:
    global_step: int  # optimizer steps taken
    model_fingerprint: dict[str, list[int]]  # parameter name -> shape
    extra: dict[str, Any]


def save_checkpoint(
    directory: Path,
    model,
    optimizer,
    *,
    global_step: int,
    trainer_rng: torch.Tensor,
    sampler_rng: torch.Tensor,
    extra: dict[str, Any] | None = None,
) -> None:
    """Save atomically into `directory` (see the module doc)."""
    import torch
    from safetensors.torch import save as safetensors_bytes

    created = not directory.exists()
    generation = f"{time.time_ns():x}-{os.getpid()}"
    files = {role: f"{stem}.{generation}{suffix}" for role, stem, suffix in _DATA_FILES}
    weights = {name: p.detach().to("cpu").contiguous() for name, p in model.named_parameters()}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # serialized in memory, written by Python: a full disk is an OSError with its errno (torch.save's
        # and safetensors' own writers raise RuntimeError / SafetensorError instead)
        _write_file(directory / files["weights"], safetensors_bytes(weights))
        optimizer_bytes = io.BytesIO()
        torch.save(optimizer.state_dict(), optimizer_bytes)
        _write_file(directory / files["optimizer"], optimizer_bytes.getbuffer())
        rng = {"trainer": trainer_rng.contiguous(), "sampler": sampler_rng.contiguous()}
        _write_file(directory / files["rng"], safetensors_bytes(rng))
        for name in files.values():
            _fsync(directory / name)
        state = {
            "format": FORMAT,
            "global_step": global_step,
            "model_fingerprint": {name: list(t.shape) for name, t in weights.items()},
            "files": files,
            "digests": {name: file_record(directory / name) for name in files.values()},
            "extra": extra or {},
        }
        write_text_atomic(directory / STATE_FILE, json.dumps(state, indent=2, sort_keys=True) + "\n")
    except OSError as error:  # a full disk, a quota, a vanished folder: keep nothing of this save
        for name in files.values():
            (directory / name).unlink(missing_ok=True)
        if created:
            shutil.rmtree(directory, ignore_errors=True)
        raise CheckpointWriteError(directory, error) from None
    for child in directory.iterdir():  # the previous generation, and leftovers of killed saves
        if child.is_file() and _OURS.match(child.name) and child.name not in files.values():
            child.unlink(missing_ok=True)


def _write_file(path: Path, data: bytes | memoryview) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


class CheckpointWriteError(OSError):
    """A save that could not be written (a full disk, most often); nothing of it was kept."""

    def __init__(self, directory: Path, cause: BaseException) -> None:
        code = write_errno(cause)
        full = code in (errno.ENOSPC, errno.EDQUOT)
        reason = "the disk is full (or over its quota)" if full else f"{type(cause).__name__}: {cause}"
        fix = (
            "free space there (older checkpoints: lower save_total_limit / the framework's checkpoints kept) "
            "or save elsewhere"
            if full
            else "check the folder and its permissions"
        )
        super().__init__(
            code,
            f"saving the checkpoint in {directory} failed: {reason}; nothing of this save was kept (an earlier "
            f"checkpoint there is untouched). Fix: {fix}, then save again",
        )
        self.directory, self.disk_full = directory, full

    def __str__(self) -> str:
        return str(self.args[1])


def write_latest(root: Path, step: int) -> None:
    """`root/latest` names checkpoint-<step> (0.1.4's pointer), or CheckpointWriteError."""
    try:
        write_text_atomic(root / "latest", str(int(step)))
    except OSError as error:
        raise CheckpointWriteError(root, error) from None


def _check_digests(directory: Path, digests: dict[str, Any], fix: str) -> None:
    """CheckpointDamaged naming the first data file that is not what the save wrote."""

    for name, saved in digests.items():
        check_file(directory / name, saved, fix, listed_in=f"the checkpoint's {STATE_FILE}")


def remove_tree_atomic(path: Path) -> None:
    """Remove a checkpoint folder so that it vanishes at once: renamed aside (hidden), then deleted."""
    aside = path.with_name(f".{path.name}.deleting-{time.time_ns():x}-{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def check_save_total_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"save_total_limit={limit!r}: an integer >= 0 (0 or None keeps every checkpoint)")


def prune_checkpoint_dirs(root: Path, keep: int) -> list[Path]:
    """Keep the newest `keep` `checkpoint-<n>` directories of `root` (by n), remove the others, as
    0.1.4's `prune_checkpoint_dirs` does; returns the removed ones."""
    found = sorted(
        (int(m.group(1)), child)
        for child in root.iterdir()
        if child.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", child.name))
    )
    removed = [child for _, child in found[:-keep]] if keep > 0 else []
    for child in removed:
        remove_tree_atomic(child)  # gone at once: never a half-deleted checkpoint that still loads
    return removed


def _read(path: Path, reader: Any, fix: str) -> Any:
    if not path.is_file():
        raise CheckpointDamaged(path, f"missing (the checkpoint's {STATE_FILE} names it)", fix)
    try:
        return reader(path)
    except (
        Exception
    ) as error:  # safetensors / torch say "incomplete metadata", "PytorchStreamReader failed"...
        raise CheckpointDamaged(path, f"unreadable ({type(error).__name__}: {error})", fix) from None


def load_checkpoint(directory: Path, model, optimizer) -> tuple[TrainerState, torch.Tensor, torch.Tensor]:
    """Restore weights and optimizer in place; returns the trainer state and the two RNG states."""
    import torch
    from safetensors.torch import load_file

    state_path = directory / STATE_FILE
    if not state_path.is_file():
        raise FileNotFoundError(
            f"{directory} is not a reference checkpoint (no {STATE_FILE}): check path and step"
        )
    fix = "Restore the checkpoint from a copy, or load an earlier one (another step)."
    try:
        raw = json.loads(state_path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"a JSON {type(raw).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointDamaged(state_path, f"unreadable ({error})", fix) from None
    if raw.get("digests"):
        _check_digests(directory, raw["digests"], fix)
    if raw.get("format") not in READABLE_FORMATS:
        raise ValueError(f"{directory}: checkpoint format {raw.get('format')!r}, expected {FORMAT!r}")
    files = raw.get("files") or {"weights": WEIGHTS_FILE, "optimizer": OPTIMIZER_FILE, "rng": RNG_FILE}
    expected = {name: list(p.shape) for name, p in model.named_parameters()}
    if raw["model_fingerprint"] != expected:
        raise ValueError(
            f"{directory} holds a different model (parameter names or shapes differ): load it into an engine "
            "built with the same backend.reference model settings"
        )
    try:  # a checkpoint saved without digests (format 1, older saves) is checked by reading it
        weights = _read(directory / files["weights"], lambda p: load_file(str(p)), fix)
        optimizer_state = _read(
            directory / files["optimizer"], lambda p: torch.load(p, weights_only=True), fix
        )
        rng = _read(directory / files["rng"], lambda p: load_file(str(p)), fix)
    except KeyError as error:
        raise CheckpointDamaged(state_path, f"names no {error} file", fix) from None
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(weights[name].to(param.device))
    optimizer.load_state_dict(optimizer_state)
    state = TrainerState(int(raw["global_step"]), raw["model_fingerprint"], dict(raw.get("extra", {})))
    return state, rng["trainer"], rng["sampler"]

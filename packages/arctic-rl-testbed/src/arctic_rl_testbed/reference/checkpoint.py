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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    generation = f"{time.time_ns():x}-{os.getpid()}"
    files = {role: f"{stem}.{generation}{suffix}" for role, stem, suffix in _DATA_FILES}
    weights = {name: p.detach().to("cpu").contiguous() for name, p in model.named_parameters()}
    save_file(weights, str(directory / files["weights"]))
    torch.save(optimizer.state_dict(), directory / files["optimizer"])
    save_file(
        {"trainer": trainer_rng.contiguous(), "sampler": sampler_rng.contiguous()},
        str(directory / files["rng"]),
    )
    for name in files.values():
        _fsync(directory / name)
    state = {
        "format": FORMAT,
        "global_step": global_step,
        "model_fingerprint": {name: list(t.shape) for name, t in weights.items()},
        "files": files,
        "extra": extra or {},
    }
    write_text_atomic(directory / STATE_FILE, json.dumps(state, indent=2, sort_keys=True) + "\n")
    for child in directory.iterdir():  # the previous generation, and leftovers of killed saves
        if child.is_file() and _OURS.match(child.name) and child.name not in files.values():
            child.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename: a reader sees the old text or the new, whole."""
    temporary = path.with_name(f".{path.stem}.{time.time_ns():x}-{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync(path.parent)


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


def load_checkpoint(directory: Path, model, optimizer) -> tuple[TrainerState, torch.Tensor, torch.Tensor]:
    """Restore weights and optimizer in place; returns the trainer state and the two RNG states."""
    import torch
    from safetensors.torch import load_file

    state_path = directory / STATE_FILE
    if not state_path.is_file():
        raise FileNotFoundError(
            f"{directory} is not a reference checkpoint (no {STATE_FILE}): check path and step"
        )
    raw = json.loads(state_path.read_text(encoding="utf-8"))
    if raw.get("format") not in READABLE_FORMATS:
        raise ValueError(f"{directory}: checkpoint format {raw.get('format')!r}, expected {FORMAT!r}")
    files = raw.get("files") or {"weights": WEIGHTS_FILE, "optimizer": OPTIMIZER_FILE, "rng": RNG_FILE}
    expected = {name: list(p.shape) for name, p in model.named_parameters()}
    if raw["model_fingerprint"] != expected:
        raise ValueError(
            f"{directory} holds a different model (parameter names or shapes differ): load it into an engine "
            "built with the same backend.reference model settings"
        )
    weights = load_file(str(directory / files["weights"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(weights[name].to(param.device))
    optimizer.load_state_dict(torch.load(directory / files["optimizer"], weights_only=True))
    rng = load_file(str(directory / files["rng"]))
    state = TrainerState(int(raw["global_step"]), raw["model_fingerprint"], dict(raw.get("extra", {})))
    return state, rng["trainer"], rng["sampler"]

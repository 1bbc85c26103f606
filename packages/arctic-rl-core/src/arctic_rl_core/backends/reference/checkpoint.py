"""Checkpoint files of the reference trainer: weights (safetensors), AdamW state, the schedule
position and step, and the RNG states (trainer dropout RNG, sampler RNG), so that a resumed run is
bit-identical to an uninterrupted one. Nothing is pickled except the optimizer state dict, which is
read back with `torch.load(weights_only=True)`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FORMAT = "arctic-rl-reference-checkpoint/1"
WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.safetensors"
STATE_FILE = "trainer_state.json"


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
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().to("cpu").contiguous() for name, p in model.named_parameters()}
    save_file(weights, str(directory / WEIGHTS_FILE))
    torch.save(optimizer.state_dict(), directory / OPTIMIZER_FILE)
    save_file(
        {"trainer": trainer_rng.contiguous(), "sampler": sampler_rng.contiguous()}, str(directory / RNG_FILE)
    )
    state = {
        "format": FORMAT,
        "global_step": global_step,
        "model_fingerprint": {name: list(t.shape) for name, t in weights.items()},
        "extra": extra or {},
    }
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def check_save_total_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"save_total_limit={limit!r}: an integer >= 0 (0 or None keeps every checkpoint)")


def prune_checkpoint_dirs(root: Path, keep: int) -> list[Path]:
    """Keep the newest `keep` `checkpoint-<n>` directories of `root` (by n), remove the others, as
    0.1.4's `prune_checkpoint_dirs` does; returns the removed ones."""
    import re
    import shutil

    found = sorted(
        (int(m.group(1)), child)
        for child in root.iterdir()
        if child.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", child.name))
    )
    removed = [child for _, child in found[:-keep]] if keep > 0 else []
    for child in removed:
        shutil.rmtree(child, ignore_errors=True)
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
    if raw.get("format") != FORMAT:
        raise ValueError(f"{directory}: checkpoint format {raw.get('format')!r}, expected {FORMAT!r}")
    expected = {name: list(p.shape) for name, p in model.named_parameters()}
    if raw["model_fingerprint"] != expected:
        raise ValueError(
            f"{directory} holds a different model (parameter names or shapes differ): load it into an engine "
            "built with the same backend.reference model settings"
        )
    weights = load_file(str(directory / WEIGHTS_FILE))
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(weights[name].to(param.device))
    optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))
    rng = load_file(str(directory / RNG_FILE))
    state = TrainerState(int(raw["global_step"]), raw["model_fingerprint"], dict(raw.get("extra", {})))
    return state, rng["trainer"], rng["sampler"]

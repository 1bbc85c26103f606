"""Recipe checks shared by the suites of several environments (`tests/core/recipes`,
`tests/skyrl/test_recipes_skyrl.py`, `tests/verl/test_recipes_verl.py`): the commands a launcher
would run, and what every GPU recipe's Arctic stack must be (the core config the adapter maps the
recipe onto, and the real arctic-platform client config it becomes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

# Runs a launcher with RECIPE_DRY_RUN=1 and re-emits each printed command as
# "<argc>\0<arg>\0<arg>\0..." (the launcher prints every argument shell-quoted).
_DRY_RUN = r"""
set -euo pipefail
RECIPE_DRY_RUN=1 bash "$@" | while IFS= read -r line; do
  eval "cmd=($line)"
  printf '%s\0' "${#cmd[@]}" "${cmd[@]}"
done
"""


def dry_run(launcher: Path, tmp_path: Path, *extra: str, **env: str) -> list[list[str]]:
    """The commands `launcher` would run (RECIPE_DRY_RUN=1), each as its argv."""
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "BIRD_DIR": str(tmp_path / "bird")}
    proc = subprocess.run(
        ["bash", "-c", _DRY_RUN, "dry-run", str(launcher), *extra],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    fields = proc.stdout.split("\0")[:-1]
    commands = []
    while fields:
        count = int(fields.pop(0))
        commands.append(fields[:count])
        del fields[:count]
    return commands


def training_overrides(commands: list[list[str]], entry_module: str) -> list[str]:
    """The overrides of the one training command (`python -m <entry_module> <overrides>`)."""
    (train,) = [c for c in commands if entry_module in c]
    return train[train.index(entry_module) + 1 :]


def assert_arctic_stack(arctic: Any, shape: Any, want: dict[str, Any]) -> None:
    """`arctic`: the recipe's core `ArcticRLConfig`; `shape`: its `TrainingShape`; `want`: the
    recipe's expected table row (model, GPUs, engines, zorro, fca, spec, zero, colocate, grad_accum)."""
    assert arctic.zorro.enable is want["zorro"]
    # ZoRRo needs flash-attention; without ZoRRo, sdpa (the locked GPU extras have no flash-attn)
    assert arctic.kernels.attn_implementation == ("flash_attention_2" if want["zorro"] else "sdpa")
    # sdpa (GSM8K): the rows of a micro-batch are sent unpacked (they would attend to each other packed),
    # in the training payloads too (the loss is arctic_rl_core, which reads that layout), fp32 log-probs
    from arctic_rl_core.wire import PayloadSpec

    spec = PayloadSpec.from_config(arctic, pad_token_id=0)
    sdpa = not want["zorro"]
    assert spec.rows_unpacked is sdpa and (spec.loss_reads_unpacked_rows or not sdpa)
    assert arctic.zorro.logits_compute_in_fp32 is sdpa
    assert arctic.arctic_inference.fca is want["fca"]
    assert arctic.arctic_inference.speculative_model == want["spec"]
    assert arctic.deepspeed.zero_stage == want["zero"]
    assert arctic.weight_sync.cuda_ipc is want["colocate"]
    assert arctic.loss.use_kl_loss is False and arctic.placement.log_prob_gpus == 0

    # What the Arctic server receives: the real arctic-platform client config (extra="forbid").
    client = arctic.to_client_config()
    assert (client.model_name, client.training_gpus, client.sampling_gpus, client.log_prob_gpus) == (
        want["model"],
        want["training_gpus"],
        want["sampling_gpus"],
        0,
    )
    assert (client.backend.protocol, client.backend.colocate) == ("ray", want["colocate"])
    vllm = client.sampling.vllm
    assert vllm["tensor_parallel_size"] * want["engines"] == want["sampling_gpus"]
    assert vllm.get("speculative_config", {}).get("model") == want["spec"]
    assert ("forest_cascade_attn_configs" in vllm) is want["fca"]
    ds = client.training.ds_config
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (
        shape.train_batch_size,
        want["grad_accum"],
    )
    assert ds["zero_optimization"]["stage"] == want["zero"] and client.training.cuda_ipc is want["colocate"]

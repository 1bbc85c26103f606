"""The startup check that an Arctic HTTP server can import `arctic_rl_losses`.

arctic-platform 0.1.4 imports a dotted-path `processing.loss_fn` inside its training worker, and a
no-grad `/forward` that names a loss runs it (without backward) and returns its metrics. So one tiny
forward naming `arctic_rl_losses.server.import_probe` (a zero loss that reports the version it
was imported from) proves, before the first rollout, that training steps will find the loss. A
server without the package fails that call (the worker's import raises; the server answers 500 with
no body); this module turns that into an error naming the fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from arctic_rl_losses.names import IMPORT_PROBE_FN

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_losses import __version__

from arctic_rl_core.backends.arctic_errors import ArcticServerError

# The backend's no-grad forward on the training job: (body, processing) -> the server's answer.
NoGradForward = Callable[[dict[str, Any], dict[str, Any]], Awaitable[Any]]


class ServerLossImportError(RuntimeError):
    """The Arctic server cannot import (or runs another version of) arctic_rl_losses."""


def probe_payload(rows: int) -> dict[str, Any]:
    """A `rows` x 2-token no-grad forward naming the probe loss (token 0 exists in every vocabulary;
    one row per training worker and gradient-accumulation step, which the server splits into)."""
    import torch

    ones = torch.ones((rows, 2), dtype=torch.int64)
    batch = {
        "input_ids": torch.zeros((rows, 2), dtype=torch.int64),
        "attention_mask": ones,
        "position_ids": torch.arange(2, dtype=torch.int64).repeat(rows, 1),
        "prompts": torch.zeros((rows, 1), dtype=torch.int64),
    }
    meta = {"pad_token_id": 0, "max_prompt_len": 1, "max_response_len": 1, "calculate_entropy": False}
    processing = {"post": ["compute_entropy_and_logprobs"], "loss_fn": IMPORT_PROBE_FN, "config": {}}
    return {"batch": batch, "meta": meta, "processing": processing}


def fix_text(cfg: ArcticRLConfig) -> str:
    return (
        f"install arctic-rl-losses=={__version__} (this driver's version) into the Python environment of the "
        f"Arctic server at {cfg.backend.host}:{cfg.backend.port} and restart it; or set "
        "backend.server_has_arctic_rl_core=false and loss.loss_fn=verl_grpo with loss.policy_loss=dual_clip "
        "(the server's built-in loss)"
    )


async def check_server_imports_losses(
    forward_no_grad: NoGradForward, cfg: ArcticRLConfig
) -> dict[str, float]:
    """Send the probe through the backend's no-grad forward (`ArcticBackend.forward_no_grad_raw`);
    raise `ServerLossImportError` naming the fix."""

    body = probe_payload(cfg.shape.data_parallel_size * cfg.shape.gradient_accumulation_steps)
    processing = body.pop("processing")
    try:
        out = await forward_no_grad(body, processing)
    except ArcticServerError as err:
        if err.status != 500:  # not the worker's import failing: the probe itself was refused
            raise ServerLossImportError(
                f"the Arctic server refused the {IMPORT_PROBE_FN} probe: {err}"
            ) from err
        raise ServerLossImportError(
            f"the Arctic server could not run {IMPORT_PROBE_FN} (loss.loss_fn=arctic_rl_core needs it to import "
            f"arctic_rl_losses): {err}. Fix: {fix_text(cfg)}"
        ) from err
    metrics = out.get("metrics") if isinstance(out, dict) else None
    if not isinstance(metrics, dict) or float(metrics.get("arctic_rl_core/import_probe", 0.0)) != 1.0:
        raise ServerLossImportError(
            f"the Arctic server answered the {IMPORT_PROBE_FN} probe without its metrics ({metrics!r}): it did not "
            f"run the loss. Fix: {fix_text(cfg)}"
        )
    major, minor = (int(p) if p.isdigit() else 0 for p in [*__version__.split("."), "0", "0"][:2])
    served = (
        int(metrics.get("arctic_rl_core/version_major", -1)),
        int(metrics.get("arctic_rl_core/version_minor", -1)),
    )
    if served != (major, minor):
        raise ServerLossImportError(
            f"the Arctic server imports arctic-rl-losses {served[0]}.{served[1]}, this driver is {__version__}: the "
            f"loss settings sent may not mean the same there. Fix: {fix_text(cfg)}"
        )
    return {key: float(value) for key, value in metrics.items()}

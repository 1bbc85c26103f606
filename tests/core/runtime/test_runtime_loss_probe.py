"""The startup probe of `loss.loss_fn=arctic_rl_core` on an HTTP server: a server that cannot import
the loss (its worker's import fails: a bare HTTP 500) fails `ArcticBackend.from_config` at once with
the fix; a refused probe is reported as such; the reference server answers it with the version."""

from __future__ import annotations

import asyncio

import pytest
from arctic_rl_core.backends.arctic_errors import ArcticServerError
from arctic_rl_core.backends.loss_probe import (
    ServerLossImportError,
    check_server_imports_losses,
    probe_payload,
)
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.config import load_config
from arctic_rl_losses import IMPORT_PROBE_FN, __version__
from arctic_rl_testbed.reference.engine import ReferenceBackend

CFG = ["backend.kind=http", "model.name=m", "checkpoint.path=/ckpt", "loss.loss_fn=arctic_rl_core"]


class _Client:
    def __init__(self, answer):
        self.answer, self.sent = answer, []

    async def fwd_no_grad(self, body, processing=None, reference_model=False):
        self.sent.append((body, processing))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class _Backend:
    """ArcticBackend's `forward_no_grad_raw` over a client that answers as told."""

    def __init__(self, answer):
        self._client = _Client(answer)

    async def forward_no_grad_raw(self, body, processing):
        return await self._client.fwd_no_grad(body, processing=processing)


def test_a_server_without_the_package_fails_naming_the_fix():
    cfg = load_config(None, CFG)
    backend = _Backend(ArcticServerError("forward", 500, "Internal Server Error"))
    with pytest.raises(ServerLossImportError) as info:
        asyncio.run(check_server_imports_losses(backend.forward_no_grad_raw, cfg))
    text = str(info.value)
    assert (
        f"install arctic-rl-losses=={__version__}" in text
        and "backend.server_has_arctic_rl_core=false" in text
    )
    body, processing = backend._client.sent[0]
    assert processing["loss_fn"] == IMPORT_PROBE_FN
    rows = cfg.shape.data_parallel_size * cfg.shape.gradient_accumulation_steps
    assert body["batch"]["input_ids"].shape == (rows, 2)


def test_a_refused_probe_and_a_silent_server_are_errors_too():
    cfg = load_config(None, CFG)
    with pytest.raises(ServerLossImportError, match="refused"):
        asyncio.run(
            check_server_imports_losses(
                _Backend(ArcticServerError("forward", 400, "bad")).forward_no_grad_raw, cfg
            )
        )
    with pytest.raises(ServerLossImportError, match="did not run the loss"):
        asyncio.run(
            check_server_imports_losses(_Backend({"batch": {}, "metrics": {}}).forward_no_grad_raw, cfg)
        )


def test_the_reference_engine_runs_the_probe_in_a_no_grad_forward_as_the_server_does():
    engine = ReferenceBackend()
    try:
        body = probe_payload(1)
        out = asyncio.run(engine.forward(WirePayload(**body)))
    finally:
        asyncio.run(engine.shutdown())
    major, minor = (int(p) for p in __version__.split(".")[:2])
    assert out.metrics["arctic_rl_core/import_probe"] == 1.0
    assert (out.metrics["arctic_rl_core/version_major"], out.metrics["arctic_rl_core/version_minor"]) == (
        major,
        minor,
    )

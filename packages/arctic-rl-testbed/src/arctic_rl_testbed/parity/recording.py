"""A `Backend` that records every training call into a parity trace and delegates to another.

What is recorded: `forward` (op `forward`, or `forward_ref` with `reference_model=True`) and
`forward_backward` payloads with their tensors, plus the returned loss; `step` outputs (grad norm,
learning rate, step). Generation, weight sync, sleep/wake and checkpoints are delegated without a
record: the parity scenario feeds fixed rollouts, and those calls carry no payload.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.backends.protocol import Backend, BackendHandle

if TYPE_CHECKING:
    import torch
    from arctic_rl_core.backends.protocol import (
        ForwardOutput,
        StepOutput,
        TrainOutput,
        WirePayload,
    )

    from arctic_rl_testbed.parity.trace_file import ParityTraceWriter


class RecordingBackend(ForwardingBackend):
    """Wraps `inner`; attributes it does not define (e.g. `tokenizer`, `pad_token_id`) are the inner
    backend's. Its `handle()` reconnects to this same object, in this process only."""

    def __init__(self, inner: Backend, writer: ParityTraceWriter) -> None:
        super().__init__(inner)
        self.inner = inner
        self.writer = writer

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "writer", "_target"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        out = await self.inner.forward(payload, reference_model=reference_model)
        self.writer.record_payload(
            "forward_ref" if reference_model else "forward",
            payload,
            logprobs_sum=float(out.logprobs_B_S.double().sum()),
            logprobs_rows=row_sums(out.logprobs_B_S),
        )
        return out

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        out = await self.inner.forward_backward(payload)
        self.writer.record_payload("forward_backward", payload, loss=float(out.loss))
        return out

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        out = await self.inner.step(learning_rate)
        self.writer.record_event(
            "step", grad_norm=float(out.grad_norm), learning_rate=float(out.learning_rate), step=int(out.step)
        )
        return out

    def handle(self) -> BackendHandle:
        return _SameProcessHandle(self)


class _SameProcessHandle(BackendHandle):
    """Reconnects to the recording backend it was made from (not meant to cross processes)."""

    def __init__(self, backend: RecordingBackend) -> None:
        self._backend = backend

    def connect(self) -> Backend:
        return self._backend


def row_sums(logprobs_B_S: torch.Tensor) -> list[float]:
    """Each row's returned log-probs summed in float64: what a trace records of a forward's result
    per row, so that a comparison that reorders rows (`trace_diff`, `canonical_rows`) can reorder it
    too (a sum over the whole batch depends on the row order in its last bits)."""
    return [float(v) for v in logprobs_B_S.double().sum(dim=1)]


def weights_digest(parameters: Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 over the parameters in name order: name, dtype, shape and little-endian bytes."""

    import torch

    if sys.byteorder != "little":
        raise NotImplementedError("weights_digest supports little-endian hosts only")
    hasher = hashlib.sha256()
    for name in sorted(parameters):
        tensor = parameters[name].detach().to("cpu").contiguous()
        hasher.update(f"|{name}:{str(tensor.dtype).removeprefix('torch.')}:{list(tensor.shape)}:".encode())
        if tensor.numel():
            hasher.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))
    return hasher.hexdigest()

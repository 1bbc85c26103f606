"""The parity trace as the server receives it: `arctic-rl serve --reference --parity-trace PATH`.

A framework's own trainer, driven over the wire (the real arctic-platform client, HTTP, DSSST1),
sends its payloads to the reference server; this recorder writes what the server decoded into the
same trace format the in-process `RecordingBackend` writes (`parity.trace_file`), so the parity
suite compares what two frameworks' trainers really sent, not a replay of their call order:

- `forward` (training job) / `forward_ref` (log-prob job) payloads with their tensors and the
  returned log-prob sum; `forward_backward` payloads with the returned loss;
- `step`: grad norm, learning rate and the optimizer step counter;
- `weights`: the trainer weights' digest when the training job is destroyed (the end of a run);
  the trace is then closed (moved into place) and later calls are not recorded.

Generation, weight sync, sleep/wake and checkpoints carry no training payload and are not recorded
(the request log, `--request-log`, has their order).
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import ForwardOutput, StepOutput, WirePayload

from arctic_rl_testbed.parity.recording import row_sums, weights_digest
from arctic_rl_testbed.parity.trace_file import ParityTraceWriter

if TYPE_CHECKING:
    from arctic_rl_testbed.reference.engine import ReferenceBackend


def received_payload(body: dict[str, Any]) -> WirePayload:
    """A copy of the server's decoded forward / forward-backward body, taken before the engine
    runs it (the engine reads and may rewrite parts of the body), as the `WirePayload` the client
    built; an absent meta or processing is empty."""

    batch = body.get("batch")
    if isinstance(batch, list):
        batch = [{k: v.clone() for k, v in mb.items()} for mb in batch]
    elif isinstance(batch, dict):
        batch = {k: v.clone() for k, v in batch.items()}
    return WirePayload(
        batch=batch,
        meta=copy.deepcopy(dict(body.get("meta") or {})),
        processing=copy.deepcopy(dict(body.get("processing") or {})),
    )


class ServerTraceRecorder:
    """Writes one parity trace at `path` from the server's handlers; closed by `finish`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writer = ParityTraceWriter(self.path)
        self._lock = threading.Lock()
        self.closed = False

    def received(self, body: dict[str, Any]) -> WirePayload | None:
        """What to record of a payload call (`received_payload`), taken before the engine runs it;
        None once the trace is closed. Recorded by `forward` / `forward_backward` after it succeeded."""
        return None if self.closed else received_payload(body)

    def forward(self, payload: WirePayload | None, out: ForwardOutput, *, reference_model: bool) -> None:
        with self._lock:
            if payload is None or self.closed:
                return
            self._writer.record_payload(
                "forward_ref" if reference_model else "forward",
                payload,
                logprobs_sum=float(out.logprobs_B_S.double().sum()),
                logprobs_rows=row_sums(out.logprobs_B_S),
            )

    def forward_backward(self, payload: WirePayload | None, loss: float) -> None:
        with self._lock:
            if payload is not None and not self.closed:
                self._writer.record_payload("forward_backward", payload, loss=float(loss))

    def step(self, out: StepOutput) -> None:
        with self._lock:
            if not self.closed:
                self._writer.record_event(
                    "step",
                    grad_norm=float(out.grad_norm),
                    learning_rate=float(out.learning_rate),
                    step=int(out.step),
                )

    def finish(self, engine: ReferenceBackend) -> Path:
        """The training job ends: record the trainer weights' digest and close the trace."""

        with self._lock:
            if not self.closed:
                self._writer.record_event("weights", digest=weights_digest(engine.trainer_parameters()))
                self._writer.close()
                self.closed = True
        return self.path

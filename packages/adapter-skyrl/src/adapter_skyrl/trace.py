"""A JSON-lines record of every payload the adapter sends (the parity suite compares these).

Op names match the verl adapter's trace: `forward` (old log-probs), `forward_ref` (reference
log-probs), `forward_backward` (payload records from `arctic_rl_core.wire.payload_to_trace_record`),
and events `step` (grad_norm, lr, step), `sync_weights` (weights_version), `save_checkpoint`,
`load_checkpoint`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.wire import payload_to_trace_record

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import WirePayload


class PayloadTrace:
    """Appends `payload_to_trace_record(op, payload)` plus the call index, one JSON object a line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index = 0

    def record(self, op: str, payload: WirePayload, **extra: Any) -> None:
        entry = {"index": self._index, **payload_to_trace_record(op, payload), **extra}
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            self._index += 1

    def record_event(self, op: str, **fields: Any) -> None:
        """A non-payload event (optimizer step, weight sync, checkpoint), same file and numbering."""
        entry = {"index": self._index, "op": op, **fields}
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            self._index += 1

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]

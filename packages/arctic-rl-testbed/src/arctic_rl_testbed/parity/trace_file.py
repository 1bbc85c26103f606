"""The parity trace: every backend call of a run, with the payload tensors themselves.

A trace is a directory `<name>.trace/` holding
- `calls.jsonl`: one JSON object per call, in call order: `index`, `op`, and for payload calls
  `payload_to_trace_record` (digest, per-tensor summary, meta, processing) plus `tensors`, the
  keys of its tensors in `tensors.safetensors`; for other calls (`step`, `rollouts`, `weights`,
  ...) their JSON fields;
- `tensors.safetensors`: every payload tensor, keyed `<index>/<micro-batch>/<field>`.
`ParityTraceWriter` writes one into a private staging directory and moves it into place when it
is closed, so a reader (or a concurrent run) never sees a half-written trace; `read_trace` loads one.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.wire import payload_to_trace_record

if TYPE_CHECKING:
    import torch
    from arctic_rl_core.backends.protocol import WirePayload

CALLS_FILE = "calls.jsonl"
TENSORS_FILE = "tensors.safetensors"


class ParityTraceWriter:
    """Records calls into a fresh trace at `path` (an existing one is replaced on `close`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._staging = self.path.with_name(f".{self.path.name}.{os.getpid()}.{id(self)}")
        if self._staging.exists():
            shutil.rmtree(self._staging)
        self._staging.mkdir(parents=True)
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._tensors: dict[str, torch.Tensor] = {}
        self._closed = False

    def record_payload(self, op: str, payload: WirePayload, **extra: Any) -> int:
        """Record a payload call; returns its index."""

        record = payload_to_trace_record(op, payload)
        batches = payload.batch if isinstance(payload.batch, list) else [payload.batch]
        with self._lock:
            index = self._next_index()
            keys = []
            for mb, batch in enumerate(batches):
                for name in sorted(batch):
                    key = f"{index}/{mb}/{name}"
                    self._tensors[key] = batch[name].detach().to("cpu").contiguous().clone()
                    keys.append(key)
            self._append({"index": index, **record, **extra, "tensors": keys})
        return index

    def record_event(self, op: str, **fields: Any) -> int:
        """Record a call without a payload (JSON fields only); returns its index."""
        with self._lock:
            index = self._next_index()
            self._append({"index": index, "op": op, **fields})
        return index

    def close(self) -> Path:
        """Write the tensors file and move the trace to `path`; returns `path`. Idempotent."""
        from safetensors.torch import save_file

        with self._lock:
            if not self._closed:
                save_file(self._tensors, str(self._staging / TENSORS_FILE))
                if self.path.exists():
                    shutil.rmtree(self.path)
                os.replace(self._staging, self.path)
                self._closed = True
        return self.path

    def _next_index(self) -> int:
        if self._closed:
            raise RuntimeError(f"the trace at {self.path} is closed: record calls before close()")
        return len(self._records)

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, allow_nan=False)
        self._records.append(record)
        with (self._staging / CALLS_FILE).open("a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclass
class TraceCall:
    """One recorded call: its JSON record and, for payload calls, its tensors by
    `(micro-batch, field)`."""

    index: int
    op: str
    record: dict[str, Any]
    tensors: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)

    @property
    def is_payload(self) -> bool:
        return "tensors" in self.record


def read_trace(path: str | Path) -> list[TraceCall]:
    """The calls of the trace at `path`, in call order."""
    from safetensors.torch import load_file

    root = Path(path)
    calls_path, tensors_path = root / CALLS_FILE, root / TENSORS_FILE
    for required in (calls_path, tensors_path):
        if not required.is_file():
            raise FileNotFoundError(
                f"{required} is missing: {root} is not a closed parity trace (ParityTraceWriter.close writes it)"
            )
    tensors = load_file(str(tensors_path))
    calls = []
    for line in calls_path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        call = TraceCall(index=record["index"], op=record["op"], record=record)
        for key in record.get("tensors", []):
            _, mb, name = key.split("/", 2)
            call.tensors[(int(mb), name)] = tensors[key]
        calls.append(call)
    return calls

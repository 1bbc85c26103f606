"""A JSONL trace of what the adapter sends to the backend (for the cross-framework parity suite).

Each process writes its own file `<trace_dir>/<role>-<pid>.jsonl`, one JSON object per line, in
the order it sent them; `read_trace(trace_dir)` merges them back in time order.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class TraceWriter:
    """Appends one JSON record per line; a no-op when `trace_dir` is None."""

    def __init__(self, trace_dir: str | None, role: str) -> None:
        self._path = None if trace_dir is None else Path(trace_dir) / f"{role}-{os.getpid()}.jsonl"
        self._lock = threading.Lock()
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` (it must carry an "op") with the current time."""
        if self._path is None:
            return
        line = json.dumps({**record, "time": time.time()}, sort_keys=True)
        with self._lock, self._path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_trace(trace_dir: str | Path) -> list[dict[str, Any]]:
    """All records of all processes under `trace_dir`, oldest first."""
    records: list[dict[str, Any]] = []
    for path in sorted(Path(trace_dir).glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f if line.strip())
    return sorted(records, key=lambda r: r["time"])

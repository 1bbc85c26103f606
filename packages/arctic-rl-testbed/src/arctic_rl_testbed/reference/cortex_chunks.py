"""The Cortex emulator's DSSST1 request-chunk groups: reassembly, and the chunk group id as the
idempotency key of a data-plane call (SnowAPI's rules, `DSS-Server-API-Specification.md` 9.3).

- Every `forward-backward` body is a chunk envelope (arctic-platform 0.1.4 forces one even when the
  frame fits); a bare frame is refused. `generate` may post the bare frame when it fits.
- An unknown group must start at chunk 0: a later first chunk answers 409 with code
  `chunk_group_restart_required` (the client then replays the group once from chunk 0).
- Re-posting a chunk the group already holds, with the same bytes, is a no-op; re-posting the
  final chunk of a completed group returns the group's one execution (never a second run).
- The same group id with a different frame hash, chunk count, frame size or chunk payload answers
  409 `chunk_group_conflict`; a final chunk while earlier ones are missing answers 409
  `chunk_group_missing_chunks`.

The store keeps the chunks of open groups and, of completed groups, the per-chunk digests and the
execution handle (the newest `max_completed` groups per job).

Bounds, checked on each chunk before its payload is stored (a hostile or broken client cannot make
the emulator hang or grow): the declared frame size is at most `max_frame_bytes`, the declared chunk
count at most `MAX_CHUNKS` and at most the frame size (a chunk carries at least one byte), a chunk's
payload never takes the group past its declared frame size, and a job's open groups hold at most
`max_open_bytes` (a new group past it is answered 429: retry once others complete or expire). An
open group untouched for `idle_expiry_s` is dropped (abandoned uploads are freed), and `clear()`
frees everything (a cancelled job).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_CHUNKS = 4096
"""Most chunks one group may declare (0.1.4 splits at 60 MiB: 4096 chunks are 240 GiB)."""
MAX_FRAME_BYTES = 1 << 30
"""Default for the largest frame a group may declare (the on-prem reference server's body limit)."""
IDLE_EXPIRY_S = 600.0
"""Default for how long an open group may wait for its next chunk before it is dropped."""

RESTART_REQUIRED = "chunk_group_restart_required"
CONFLICT = "chunk_group_conflict"
MISSING_CHUNKS = "chunk_group_missing_chunks"


class ChunkGroupError(Exception):
    """A chunk-group rule broken: 409 with a JSON body carrying `code` and `chunk_group_id`."""

    def __init__(self, code: str, group_id: str | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.group_id = group_id
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "chunk_group_id": self.group_id, "message": self.message}


class ChunkFrameError(ValueError):
    """A body that is not a well-formed DSSST1 request chunk, or that declares more than the bounds
    allow (answered 400)."""


class ChunkStoreFull(Exception):
    """A new group while the job's open groups already hold `max_open_bytes` (answered 429)."""


@dataclass
class _Group:
    group_id: str
    operation: str
    frame_sha256: str
    frame_size: int
    total: int
    payloads: dict[int, bytes] = field(default_factory=dict)
    digests: dict[int, str] = field(default_factory=dict)
    execution: Any = None  # set by the caller once the complete frame was handed over
    touched: float = 0.0  # the clock's time of the group's last chunk
    held: int = 0  # payload bytes stored (until the frame is reassembled)

    @property
    def complete(self) -> bool:
        return self.execution is not None


@dataclass(frozen=True)
class Accepted:
    """One posted chunk's outcome: `frame` is the reassembled frame when this chunk completed a new
    group (run it, then `attach` the execution); `execution` is set when the group already ran."""

    group_id: str | None
    chunk_idx: int
    total: int
    frame: bytes | None = None
    execution: Any = None

    @property
    def final(self) -> bool:
        return self.frame is not None or self.execution is not None


class ChunkGroups:
    """Chunk groups of one job."""

    def __init__(
        self,
        *,
        max_completed: int = 256,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_open_bytes: int | None = None,
        idle_expiry_s: float = IDLE_EXPIRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._groups: OrderedDict[str, _Group] = OrderedDict()
        self._max_completed = max_completed
        self.max_frame_bytes = max_frame_bytes
        self.max_open_bytes = max_frame_bytes if max_open_bytes is None else max_open_bytes
        self.idle_expiry_s = idle_expiry_s
        self._clock = clock

    def accept(self, body: bytes, *, operation: str, bare_allowed: bool) -> Accepted:
        """Take one posted body of `operation` (the wire name: `fwd-bwd`, `generate`)."""
        from arctic_platform import wire

        desc = wire.read_byte_chunk_metadata(body)
        if desc is None:
            if not bare_allowed:
                raise ChunkFrameError(
                    f"{operation}: the body is a bare DSSST1 frame; this endpoint takes a DSSST1 request-chunk "
                    "envelope (wire.encode_byte_chunks(kind='request', force_chunk=True)) whose chunk_group_id is "
                    "the call's idempotency key"
                )
            return Accepted(None, 0, 1, frame=bytes(body))
        if desc.get("kind") != "request":
            raise ChunkFrameError(f"{operation}: a {desc.get('kind')} chunk was posted; post request chunks")
        try:
            idx, total = int(desc["chunk_idx"]), int(desc["total_chunks"])
            frame_sha, frame_size = str(desc["frame_sha256"]), int(desc["frame_size_bytes"])
        except (KeyError, TypeError, ValueError):
            raise ChunkFrameError(
                f"{operation}: the chunk descriptor needs chunk_idx, total_chunks, frame_sha256, frame_size_bytes"
            ) from None
        group_id = desc.get("chunk_group_id")
        if not isinstance(group_id, str) or not group_id:
            raise ChunkFrameError(f"{operation}: the request chunk carries no chunk_group_id")
        if desc.get("operation") not in (None, operation):
            raise ChunkFrameError(
                f"{operation}: the chunk's operation is {desc.get('operation')!r}; post it to its own endpoint"
            )
        self._check_declared(operation, idx, total, frame_size)
        now = self._clock()
        self.expire(now)
        payload = _chunk_payload(body, operation)
        digest = hashlib.sha256(payload).hexdigest()

        group = self._groups.get(group_id)
        if group is None:
            if idx != 0:
                raise ChunkGroupError(
                    RESTART_REQUIRED,
                    group_id,
                    f"chunk group {group_id} is unknown and chunk {idx} is not its first chunk: replay the group "
                    "from chunk 0",
                )
            if self.open_bytes() + len(payload) > self.max_open_bytes:
                raise ChunkStoreFull(
                    f"{operation}: this job's unfinished chunk groups already hold {self.open_bytes():,} bytes "
                    f"(limit {self.max_open_bytes:,}); finish or abandon them (an untouched group is dropped "
                    f"after {self.idle_expiry_s:g} s), then retry"
                )
            group = _Group(group_id, operation, frame_sha, frame_size, total)
            self._groups[group_id] = group
        elif (group.operation, group.frame_sha256, group.frame_size, group.total) != (
            operation,
            frame_sha,
            frame_size,
            total,
        ):
            raise ChunkGroupError(
                CONFLICT,
                group_id,
                f"chunk group {group_id} was opened for another frame (operation, frame_sha256, frame size or "
                "chunk count differ): a chunk group id names exactly one frame; use a new id for a new call",
            )
        known = group.digests.get(idx)
        if known is not None and known != digest:
            raise ChunkGroupError(
                CONFLICT,
                group_id,
                f"chunk {idx} of chunk group {group_id} was posted before with other bytes",
            )
        if group.complete:
            if idx == total - 1:
                return Accepted(group_id, idx, total, execution=group.execution)
            return Accepted(group_id, idx, total)
        group.touched = now
        if idx not in group.payloads:
            if group.held + len(payload) > group.frame_size:
                self._groups.pop(group_id, None)
                raise ChunkFrameError(
                    f"{operation}: chunk group {group_id}'s chunks carry more than its declared frame_size_bytes="
                    f"{group.frame_size:,}; the group is dropped: send the frame again with a new group id"
                )
            group.held += len(payload)
        group.digests[idx] = digest
        group.payloads[idx] = payload
        if idx != total - 1:
            return Accepted(group_id, idx, total)
        if len(group.payloads) < total:
            missing = [i for i in range(total) if i not in group.payloads][:8]
            raise ChunkGroupError(
                MISSING_CHUNKS,
                group_id,
                f"request chunk group is missing chunks: {missing[:8]} of {total} (post them before the final one)",
            )
        frame = b"".join(group.payloads[i] for i in range(total))
        if len(frame) != frame_size or hashlib.sha256(frame).hexdigest() != frame_sha:
            del self._groups[group_id]
            raise ChunkFrameError(
                f"{operation}: chunk group {group_id} reassembles to a frame whose size or sha256 differs from its "
                "descriptor"
            )
        group.payloads.clear()
        group.held = 0
        return Accepted(group_id, idx, total, frame=frame)

    def _check_declared(self, operation: str, idx: int, total: int, frame_size: int) -> None:
        """The descriptor's numbers within the bounds (module doc), before anything is stored."""
        if not 1 <= frame_size <= self.max_frame_bytes:
            raise ChunkFrameError(
                f"{operation}: frame_size_bytes={frame_size} is outside 1..{self.max_frame_bytes:,} (the largest "
                "frame this server takes); send less per call"
            )
        most = min(MAX_CHUNKS, frame_size)
        if not 1 <= total <= most:
            raise ChunkFrameError(
                f"{operation}: total_chunks={total} is outside 1..{most} (at most {MAX_CHUNKS} chunks, each carrying "
                f"at least one of the frame's {frame_size:,} bytes); split the frame with wire.encode_byte_chunks"
            )
        if not 0 <= idx < total:
            raise ChunkFrameError(f"{operation}: chunk_idx={idx} is outside 0..{total - 1}")

    def expire(self, now: float | None = None) -> list[str]:
        """Drop the open groups untouched for `idle_expiry_s` (abandoned uploads); their ids."""
        now = self._clock() if now is None else now
        stale = [
            gid for gid, g in self._groups.items() if not g.complete and now - g.touched > self.idle_expiry_s
        ]
        for gid in stale:
            del self._groups[gid]
        return stale

    def clear(self) -> None:
        """Drop every group (the job was cancelled or released)."""
        self._groups.clear()

    def open_bytes(self) -> int:
        """Payload bytes the open groups hold."""
        return sum(g.held for g in self._groups.values())

    def attach(self, group_id: str | None, execution: Any) -> None:
        """Record the one execution of a completed group (the idempotent answer to its replays)."""
        if group_id is None:
            return
        self._groups[group_id].execution = execution
        self._groups.move_to_end(group_id)
        completed = [gid for gid, g in self._groups.items() if g.complete]
        for gid in completed[: max(0, len(completed) - self._max_completed)]:
            del self._groups[gid]

    def forget(self, group_id: str | None) -> None:
        """Drop a group whose frame was refused before it ran (a fixed frame may reuse the id)."""
        if group_id is not None:
            self._groups.pop(group_id, None)

    def open_groups(self) -> int:
        return sum(1 for g in self._groups.values() if not g.complete)


def _chunk_payload(body: bytes, operation: str) -> bytes:
    import torch
    from arctic_platform import wire

    try:
        decoded = wire.loads(body)
    except wire.WireError as err:
        raise ChunkFrameError(f"{operation}: the chunk is not a DSSST1 frame ({err})") from None
    payload = decoded.get("payload") if isinstance(decoded, dict) else None
    if not torch.is_tensor(payload) or payload.dtype != torch.uint8 or payload.dim() != 1:
        raise ChunkFrameError(f"{operation}: a request chunk carries a 1-D uint8 'payload' tensor")
    return payload.contiguous().numpy().tobytes()

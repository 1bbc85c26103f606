"""A canonical digest of a payload, and a JSON trace record of it.

The digest is SHA-256 over a canonical encoding: a version tag; the batch shape (one dict or
a list of micro-batch dicts); per tensor, in sorted key order, its name, dtype, shape and
little-endian bytes; then `meta` and `processing` as canonical JSON (sorted keys, no spaces,
shortest round-trip floats, NaN refused). Equal payloads give equal digests in any process on
any platform; any change of a value, dtype, shape, key or setting changes it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import WirePayload

if TYPE_CHECKING:
    import torch

DIGEST_VERSION = "arctic-rl-wire-digest-v1"


def payload_digest(payload: WirePayload) -> str:
    """Hex SHA-256 of the canonical encoding of `payload` (see the module docstring)."""
    hasher = hashlib.sha256()
    hasher.update(DIGEST_VERSION.encode())
    batches = payload.batch if isinstance(payload.batch, list) else [payload.batch]
    hasher.update(f"|batch:{'list' if isinstance(payload.batch, list) else 'dict'}:{len(batches)}".encode())
    for mb in batches:
        hasher.update(f"|mb:{len(mb)}".encode())
        for name in sorted(mb):
            _update_tensor(hasher, name, mb[name])
    hasher.update(b"|meta:" + canonical_json(payload.meta).encode())
    hasher.update(b"|processing:" + canonical_json(payload.processing).encode())
    return hasher.hexdigest()


def payload_to_trace_record(op: str, payload: WirePayload) -> dict[str, Any]:
    """A JSON-able record of one request: op, digest, per-tensor summary, meta and processing.

    Per tensor: dtype, shape, float64 sum and a short digest of its bytes, so two traces can be
    diffed tensor by tensor when their payload digests differ."""
    batches = payload.batch if isinstance(payload.batch, list) else [payload.batch]
    summaries = []
    for mb in batches:
        summary = {}
        for name in sorted(mb):
            tensor = _cpu_contiguous(name, mb[name])
            tensor_hash = hashlib.sha256()
            _update_tensor(tensor_hash, name, tensor)
            summary[name] = {
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "shape": list(tensor.shape),
                "sum": float(tensor.double().sum()) if tensor.numel() else 0.0,
                "digest": tensor_hash.hexdigest()[:16],
            }
        summaries.append(summary)
    return {
        "op": op,
        "digest": payload_digest(payload),
        "batch": summaries if isinstance(payload.batch, list) else summaries[0],
        "meta": json.loads(canonical_json(payload.meta)),
        "processing": json.loads(canonical_json(payload.processing)),
    }


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON; numpy scalars become Python numbers; tensors are refused."""
    try:
        return json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
            default=_json_default,
        )
    except ValueError as exc:
        raise ValueError(f"payload meta/processing cannot be encoded canonically: {exc}") from None


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(
        f"{type(value).__name__} is not JSON data: meta/processing must hold plain numbers, strings, "
        "lists and dicts (convert tensors with .item() / .tolist())"
    )


def _cpu_contiguous(name: str, tensor: Any) -> torch.Tensor:
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"batch[{name!r}] is a {type(tensor).__name__}: payload batches hold torch tensors")
    return tensor.detach().to("cpu").contiguous()


def _update_tensor(hasher: Any, name: str, tensor: Any) -> None:
    import torch

    tensor = _cpu_contiguous(name, tensor)
    hasher.update(f"|t:{name}:{str(tensor.dtype).removeprefix('torch.')}:{list(tensor.shape)}:".encode())
    if tensor.numel() == 0:
        return
    if sys.byteorder != "little":  # the digest is defined over little-endian bytes
        raise NotImplementedError("payload_digest supports little-endian hosts only")
    hasher.update(memoryview(tensor.reshape(-1).view(torch.uint8).numpy()))

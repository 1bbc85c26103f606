"""Compare two parity traces call by call and say exactly where they differ.

`diff_traces(a, b)` pairs the calls in order and reports, per difference, the call (index and
op), the field (`op`, `batch.<mb>.<tensor>` with dtype/shape/first differing index and both
values, `meta.<key path>`, `processing.<key path>`, or an event field such as `grad_norm`), and
both values. `format_differences` renders them for a test failure.

Pinned framework difference handled here: before a training step SkyRL 0.4.0 asks for the
reference log-probs first and then the policy's; verl 0.9.1 asks for the policy's first. No-grad
forwards do not change any state, so `canonical_order` sorts each run of consecutive no-grad
forwards by op (`forward` before `forward_ref`) before pairing; everything else keeps its order.

Over the wire (`canonical_rows=True`, the traces recorded from the two real trainers), one more
thing legitimately differs: which of a GRPO group's identical prompts got which of the group's
fixed rollouts (the server serves them in order of arrival, and verl's concurrent requests arrive in
any order). `canonical_rows` puts each payload's rows in one order: groups (rows with the same prompt
tokens) where they first appear, rows within a group sorted by their token ids; every tensor whose
first dimension is the batch follows, and so do the per-row log-prob sums (`logprobs_rows`), which
then replace the whole-batch sum (a float64 sum over the batch depends on row order in its last
bits). Nothing else is reordered: a group in another place (of a no-grad forward too: the verl adapter
trains in dataloader order, `adapter_verl.batch_order`, where stock verl's rollout batch comes back in
completion order), a row moved across groups, or any value changed is still a difference. Why
reordering within a group changes no training state, bit for bit, is in docs/parity.md
(one group of 2 rows per mini-batch, one row per micro-batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_testbed.parity.trace_file import TraceCall, read_trace

if TYPE_CHECKING:
    import torch

NO_GRAD_OPS: tuple[str, ...] = ("forward", "forward_ref")
# Record keys that describe a call but are not part of what is compared.
_BOOKKEEPING = frozenset({"index", "tensors", "batch", "digest", "time"})


@dataclass(frozen=True)
class TraceDifference:
    """One difference: `call` is the position after `canonical_order` (both traces' indices are
    in `detail` when they differ)."""

    call: int
    op: str
    field: str
    left: Any
    right: Any
    detail: str = ""

    def describe(self, names: tuple[str, str] = ("left", "right")) -> str:
        text = (
            f"call {self.call} ({self.op}) {self.field}: {names[0]}={self.left!r} {names[1]}={self.right!r}"
        )
        return f"{text} [{self.detail}]" if self.detail else text


def canonical_order(calls: Sequence[TraceCall]) -> list[TraceCall]:
    """`calls` with each run of consecutive no-grad forwards sorted by op (stable)."""
    out: list[TraceCall] = []
    run: list[TraceCall] = []
    for call in calls:
        if call.op in NO_GRAD_OPS:
            run.append(call)
            continue
        out.extend(sorted(run, key=lambda c: NO_GRAD_OPS.index(c.op)))
        run = []
        out.append(call)
    out.extend(sorted(run, key=lambda c: NO_GRAD_OPS.index(c.op)))
    return out


def row_permutation(call: TraceCall) -> list[int] | None:
    """The canonical row order of a dense payload call (see the module docstring), as indices into
    its rows; None for a call without a one-batch payload."""
    if not call.is_payload or {mb for mb, _ in call.tensors} != {0}:
        return None
    ids, mask = call.tensors.get((0, "input_ids")), call.tensors.get((0, "attention_mask"))
    prompts = call.tensors.get((0, "prompts"))
    if ids is None or mask is None or prompts is None:
        return None
    width = int(prompts.shape[1])
    first_seen: dict[tuple[int, ...], int] = {}
    keys = []
    for row in range(int(ids.shape[0])):
        prompt = tuple(ids[row, :width][mask[row, :width].bool()].tolist())
        group = first_seen.setdefault(prompt, len(first_seen))
        keys.append((group, ids[row].tolist(), mask[row].tolist(), row))
    return [key[-1] for key in sorted(keys)]


def canonical_row_order(call: TraceCall) -> TraceCall:
    """`call` with its payload rows in the canonical order (a new call; unchanged when not a payload)."""
    order = row_permutation(call)
    if order is None:
        return call
    rows = len(order)
    tensors = {
        key: value[order] if value.dim() >= 1 and int(value.shape[0]) == rows else value
        for key, value in call.tensors.items()
    }
    record = dict(call.record)
    if isinstance(record.get("logprobs_rows"), list) and len(record["logprobs_rows"]) == rows:
        record["logprobs_rows"] = [record["logprobs_rows"][i] for i in order]
        record.pop("logprobs_sum", None)
    return TraceCall(index=call.index, op=call.op, record=record, tensors=tensors)


def diff_traces(
    left: Sequence[TraceCall] | str | Path,
    right: Sequence[TraceCall] | str | Path,
    *,
    reorder_no_grad_forwards: bool = True,
    canonical_rows: bool = False,
) -> list[TraceDifference]:
    """Every difference between two traces (paths or loaded calls); empty when they are identical."""
    a = read_trace(left) if isinstance(left, str | Path) else list(left)
    b = read_trace(right) if isinstance(right, str | Path) else list(right)
    if canonical_rows:
        a, b = [canonical_row_order(c) for c in a], [canonical_row_order(c) for c in b]
    if reorder_no_grad_forwards:
        a, b = canonical_order(a), canonical_order(b)
    diffs: list[TraceDifference] = []
    if len(a) != len(b):
        diffs.append(
            TraceDifference(
                min(len(a), len(b)),
                "-",
                "number of calls",
                len(a),
                len(b),
                f"ops: {[c.op for c in a]} vs {[c.op for c in b]}",
            )
        )
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        diffs.extend(diff_calls(position, x, y))
    return diffs


def diff_calls(position: int, x: TraceCall, y: TraceCall) -> list[TraceDifference]:
    """The differences of two calls at the same position."""
    where = "" if x.index == y.index else f"indices {x.index} vs {y.index}"
    if x.op != y.op:
        return [TraceDifference(position, f"{x.op}|{y.op}", "op", x.op, y.op, where)]
    diffs: list[TraceDifference] = []
    if x.is_payload != y.is_payload:
        return [TraceDifference(position, x.op, "payload", x.is_payload, y.is_payload, where)]
    if x.is_payload:
        keys = sorted(set(x.tensors) | set(y.tensors))
        for key in keys:
            name = f"batch.{key[0]}.{key[1]}"
            if key not in x.tensors or key not in y.tensors:
                diffs.append(
                    TraceDifference(position, x.op, name, key in x.tensors, key in y.tensors, "present?")
                )
                continue
            diff = _tensor_difference(x.tensors[key], y.tensors[key])
            if diff is not None:
                left, right, detail = diff
                diffs.append(TraceDifference(position, x.op, name, left, right, detail))
    fields = sorted((set(x.record) | set(y.record)) - _BOOKKEEPING)
    for key in fields:
        diffs.extend(_value_differences(position, x.op, key, x.record.get(key), y.record.get(key)))
    return diffs


def _tensor_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, Any, str] | None:
    import torch

    if a.dtype != b.dtype:
        return str(a.dtype), str(b.dtype), "dtype"
    if a.shape != b.shape:
        return list(a.shape), list(b.shape), "shape"
    if a.dtype.is_floating_point:
        # bitwise equality: NaN == NaN, and -0.0 != 0.0 (the digest sees the bytes too)
        unequal = a.view(_int_view(a.dtype)) != b.view(_int_view(b.dtype))
    else:
        unequal = a != b
    if not bool(unequal.any()):
        return None
    first = torch.nonzero(unequal)[0].tolist()
    count = int(unequal.sum())
    return a[tuple(first)].item(), b[tuple(first)].item(), f"first differing index {first}, {count} differ"


def _int_view(dtype: torch.dtype) -> torch.dtype:
    import torch

    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def _value_differences(position: int, op: str, path: str, a: Any, b: Any) -> list[TraceDifference]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out.extend(_value_differences(position, op, f"{path}.{key}", a.get(key), b.get(key)))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            out.extend(_value_differences(position, op, f"{path}[{i}]", u, v))
        return out
    if _same(a, b):
        return []
    return [TraceDifference(position, op, path, a, b)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def format_differences(
    diffs: Sequence[TraceDifference], names: tuple[str, str] = ("left", "right"), *, limit: int = 20
) -> str:
    """A readable report: the count, then one line per difference (at most `limit`)."""
    if not diffs:
        return f"{names[0]} and {names[1]} traces are identical"
    lines = [f"{len(diffs)} difference(s) between the {names[0]} and {names[1]} traces:"]
    lines.extend("  " + d.describe(names) for d in diffs[:limit])
    if len(diffs) > limit:
        lines.append(f"  ... and {len(diffs) - limit} more")
    return "\n".join(lines)

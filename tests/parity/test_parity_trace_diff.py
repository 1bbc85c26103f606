"""Parity traces round-trip with their tensors, and the diff names call, field, first index, values."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_testbed.parity.trace_diff import canonical_order, diff_traces, format_differences
from arctic_rl_testbed.parity.trace_file import ParityTraceWriter, read_trace


def _payload(scale: float = 1.0, pad: int = 0, mb: int = 1) -> WirePayload:
    batch = {
        "input_ids": torch.arange(12, dtype=torch.int64).reshape(2, 6),
        "advantages": torch.linspace(-1, 1, 12, dtype=torch.float32).reshape(2, 6) * scale,
    }
    meta = {"pad_token_id": pad, "actor_config": {"clip_ratio_low": 0.2}, "global_batch_size": 2}
    processing = {"post": ["apply_temperature"], "loss_fn": "verl_grpo"}
    return WirePayload(batch=[batch] * mb if mb > 1 else batch, meta=meta, processing=processing)


def _trace(path, calls) -> list:
    writer = ParityTraceWriter(path)
    for op, payload, extra in calls:
        if payload is None:
            writer.record_event(op, **extra)
        else:
            writer.record_payload(op, payload, **extra)
    writer.close()
    return read_trace(path)


def test_round_trip_keeps_tensors_and_records(tmp_path):
    calls = _trace(
        tmp_path / "a.trace",
        [("forward", _payload(), {}), ("forward_backward", _payload(mb=2), {"loss": 0.5}),
         ("step", None, {"grad_norm": 1.25, "step": 1})],
    )  # fmt: skip
    assert [c.op for c in calls] == ["forward", "forward_backward", "step"]
    assert torch.equal(calls[0].tensors[(0, "advantages")], _payload().batch["advantages"])
    assert sorted(calls[1].tensors) == [
        (0, "advantages"),
        (0, "input_ids"),
        (1, "advantages"),
        (1, "input_ids"),
    ]
    assert calls[1].record["loss"] == 0.5 and calls[2].record["grad_norm"] == 1.25
    assert not calls[2].is_payload and calls[2].tensors == {}
    assert diff_traces(tmp_path / "a.trace", tmp_path / "a.trace") == []


def test_diff_names_the_call_field_first_index_and_both_values(tmp_path):
    a = _trace(tmp_path / "a.trace", [("forward", _payload(), {}), ("step", None, {"grad_norm": 1.0})])
    changed = _payload()
    changed.batch["advantages"][1, 4] = 7.0
    b = _trace(tmp_path / "b.trace", [("forward", changed, {}), ("step", None, {"grad_norm": 1.5})])
    diffs = diff_traces(a, b)
    by_field = {d.field: d for d in diffs}
    tensor = by_field["batch.0.advantages"]
    assert (tensor.call, tensor.op) == (0, "forward")
    assert tensor.left == pytest.approx(_payload().batch["advantages"][1, 4].item()) and tensor.right == 7.0
    assert "first differing index [1, 4], 1 differ" in tensor.detail
    assert (by_field["grad_norm"].left, by_field["grad_norm"].right) == (1.0, 1.5)
    report = format_differences(diffs, ("skyrl", "verl"))
    assert "call 0 (forward) batch.0.advantages: skyrl=" in report and "verl=7.0" in report


def test_meta_processing_dtype_shape_and_count_differences(tmp_path):
    a = _trace(tmp_path / "a.trace", [("forward_backward", _payload(), {})])
    other = _payload(pad=3)
    other.processing["loss_fn"] = None
    other.batch["input_ids"] = other.batch["input_ids"].to(torch.int32)
    other.batch["advantages"] = other.batch["advantages"][:, :5]
    b = _trace(tmp_path / "b.trace", [("forward_backward", other, {}), ("step", None, {"grad_norm": 1.0})])
    fields = {d.field: d for d in diff_traces(a, b)}
    assert (fields["meta.pad_token_id"].left, fields["meta.pad_token_id"].right) == (0, 3)
    assert fields["processing.loss_fn"].right is None
    assert fields["batch.0.input_ids"].detail == "dtype"
    assert fields["batch.0.advantages"].detail == "shape"
    assert (fields["number of calls"].left, fields["number of calls"].right) == (1, 2)


def test_negative_zero_and_nan_compare_by_bits(tmp_path):
    x, y = _payload(), _payload()
    x.batch["advantages"][0, 0] = 0.0
    y.batch["advantages"][0, 0] = -0.0
    a = _trace(tmp_path / "a.trace", [("forward", x, {})])
    b = _trace(tmp_path / "b.trace", [("forward", y, {})])
    assert [d.field for d in diff_traces(a, b)] == ["batch.0.advantages"]


def test_no_grad_forwards_are_compared_in_a_canonical_order(tmp_path):
    """Pinned: SkyRL asks for reference log-probs before the policy's, verl after."""
    ref = _payload(scale=2.0)
    skyrl = _trace(
        tmp_path / "s.trace",
        [("forward_ref", ref, {}), ("forward", _payload(), {}), ("forward_backward", _payload(), {})],
    )
    verl = _trace(
        tmp_path / "v.trace",
        [("forward", _payload(), {}), ("forward_ref", ref, {}), ("forward_backward", _payload(), {})],
    )
    assert [c.op for c in canonical_order(skyrl)] == ["forward", "forward_ref", "forward_backward"]
    assert diff_traces(skyrl, verl) == []
    assert {d.field for d in diff_traces(skyrl, verl, reorder_no_grad_forwards=False)} == {"op"}


def test_a_forward_after_training_is_not_moved_across_it(tmp_path):
    calls = _trace(
        tmp_path / "a.trace",
        [("forward_ref", _payload(), {}), ("forward_backward", _payload(), {}), ("forward", _payload(), {})],
    )
    assert [c.op for c in canonical_order(calls)] == ["forward_ref", "forward_backward", "forward"]


def test_an_unclosed_trace_is_refused_with_the_reason(tmp_path):
    writer = ParityTraceWriter(tmp_path / "open.trace")
    writer.record_event("step", grad_norm=1.0)
    with pytest.raises(FileNotFoundError, match="not a closed parity trace"):
        read_trace(tmp_path / "open.trace")
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.record_event("step", grad_norm=2.0)


def _grouped_payload(order: list[int], *, advantage_scale: float = 1.0) -> tuple[WirePayload, list[float]]:
    """Four rows, two GRPO groups (prompt [5, 6] then [7]), in `order`; per-row log-prob sums."""
    prompts = [[5, 6], [5, 6], [0, 7], [0, 7]]
    responses = [[11, 12], [13, 0], [21, 22], [23, 24]]
    ids = torch.tensor([prompts[i] + responses[i] for i in order])
    mask = ids != 0
    advantages = torch.tensor(
        [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, -1.0, 0.0], [0, 0, 0.5, 0.5], [0, 0, -0.5, -0.5]]
    )
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "prompts": torch.zeros((4, 2, 0), dtype=torch.bool),
        "advantages": advantages[order] * advantage_scale,
    }
    sums = [[-1.5, -2.25, -3.0, -0.125][i] for i in order]
    return WirePayload(batch=batch, meta={"global_batch_size": 4}, processing={}), sums


@pytest.mark.parametrize("op", ["forward", "forward_backward"])
def test_canonical_rows_reorder_within_a_group_only(tmp_path, op):
    """Rows swapped within a group (which of a group's identical prompts got which fixed rollout)
    compare equal with `canonical_rows`, tensors and per-row log-prob sums alike; groups in another
    order (in a no-grad forward too: both adapters send the step's groups in dataloader order), or a
    changed value, are still reported."""

    def trace(name, order, **kw):
        payload, sums = _grouped_payload(order, **kw)
        extra = {"logprobs_rows": sums, "logprobs_sum": sum(sums)}
        return _trace(tmp_path / name, [(op, payload, extra)])

    base = trace("a.trace", [0, 1, 2, 3])
    within = trace("b.trace", [1, 0, 3, 2])
    assert diff_traces(base, within)  # without canonicalisation: different rows at each position
    assert diff_traces(base, within, canonical_rows=True) == []
    groups_swapped = trace("c.trace", [2, 3, 0, 1])
    assert diff_traces(base, groups_swapped)
    fields = {d.field for d in diff_traces(base, groups_swapped, canonical_rows=True)}
    assert {"batch.0.input_ids", "batch.0.advantages"} <= fields
    scaled = trace("d.trace", [1, 0, 3, 2], advantage_scale=2.0)
    assert {d.field for d in diff_traces(base, scaled, canonical_rows=True)} == {"batch.0.advantages"}

"""Trainer -> sampler weight copy through bucketed flat buffers, the way the server streams
weights to inference engines: parameters (in `named_parameters` order, tied weights once) are packed
into flat buffers of at most `bucket_bytes` (one dtype per bucket; a parameter larger than a bucket
travels alone), and each buffer is unpacked into the sampler's parameters by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TransferReport:
    num_buckets: int
    num_tensors: int
    num_bytes: int


def plan_buckets(
    params: list[tuple[str, torch.Tensor]], bucket_bytes: int
) -> list[list[tuple[str, torch.Tensor]]]:
    """Group consecutive same-dtype parameters into buckets of at most `bucket_bytes`."""
    buckets: list[list[tuple[str, torch.Tensor]]] = []
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, param in params:
        nbytes = param.numel() * param.element_size()
        if current and (size + nbytes > bucket_bytes or current[0][1].dtype != param.dtype):
            buckets.append(current)
            current, size = [], 0
        current.append((name, param))
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def transfer_weights(
    source, target, bucket_bytes: int, only: Callable[[str], bool] | None = None
) -> TransferReport:
    """Copy every parameter of `source` into `target` (same names, shapes and dtypes) bit for bit;
    with `only`, just the parameters whose name it accepts (a LoRA-format sync: the adapters)."""
    import torch

    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes={bucket_bytes}: must be >= 1")
    sent = list(source.named_parameters())
    received = dict(target.named_parameters())
    names = [name for name, _ in sent]
    if names != list(received):
        missing = sorted(set(names) ^ set(received))
        raise ValueError(f"trainer and sampler parameters differ by name: {missing[:5]}")
    for name, param in sent:
        other = received[name]
        if other.shape != param.shape or other.dtype != param.dtype:
            raise ValueError(
                f"parameter {name}: trainer {tuple(param.shape)} {param.dtype} vs sampler {tuple(other.shape)} {other.dtype}"
            )
    if only is not None:
        sent = [(name, param) for name, param in sent if only(name)]
        if not sent:
            raise ValueError("no parameter to send: the filter accepted none")
    total = 0
    buckets = plan_buckets(sent, bucket_bytes)
    with torch.no_grad():
        for bucket in buckets:
            numel = sum(p.numel() for _, p in bucket)
            flat = torch.empty(numel, dtype=bucket[0][1].dtype, device=bucket[0][1].device)
            offset = 0
            for _, param in bucket:  # pack (the sending side)
                flat[offset : offset + param.numel()].copy_(param.detach().reshape(-1))
                offset += param.numel()
            offset = 0
            for name, param in bucket:  # unpack (the receiving side)
                dest = received[name]
                dest.copy_(flat[offset : offset + param.numel()].view(param.shape).to(dest.device))
                offset += param.numel()
            total += flat.numel() * flat.element_size()
    return TransferReport(num_buckets=len(buckets), num_tensors=len(sent), num_bytes=total)

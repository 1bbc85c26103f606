"""`arctic-rl bench payload`: time to build the train payload from per-sample rollouts.

Ours: `arctic_rl_core.wire.build_train_payload` (each sample's list packed in C straight into its
row). Baselines, measured in the same run (interleaved rounds, the best of each counts):

- the strongest simple alternative: numpy buffers of the payload's own dtypes, filled row by row
  with slice assignment from the lists (SkyRL 0.4's preprocessing style);
- the per-sample loop the legacy integrations used (per sample and field: a tensor from the sample's
  list, pad/concatenate to the full row; then stack the rows).

Inputs are what SkyRL hands over: Python lists of ids, masks and log-probs, scalar GRPO advantages.
All three outputs are compared tensor by tensor before any time is reported.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from arctic_rl_testbed.bench.report import BenchResult

if TYPE_CHECKING:
    import torch
    from arctic_rl_core.wire import PayloadSpec, RolloutSample
import os

from arctic_rl_testbed.bench.conditions import serial_conditions
from arctic_rl_testbed.bench.report import Comparison

NAME = "payload"
HELP = "Build time of the B x (P+R) train payload vs a numpy row fill and a per-sample torch loop (B=512, S=8192)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=512, help="rollouts per payload (default 512)")
    parser.add_argument("--prompt-len", type=int, default=1024, help="max prompt length P (default 1024)")
    parser.add_argument("--response-len", type=int, default=7168, help="max response length R (default 7168)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best round counts (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random rollouts")


def make_samples(batch: int, prompt_len: int, response_len: int, seed: int) -> list[RolloutSample]:
    """Rollouts with uniform random lengths in [1, P] / [1, R], as Python lists."""
    import numpy as np
    from arctic_rl_core.wire import RolloutSample  # noqa: PLC0415 - CLI start-up

    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(batch):
        lp, lr = int(rng.integers(1, prompt_len + 1)), int(rng.integers(1, response_len + 1))
        samples.append(
            RolloutSample(
                prompt_ids=rng.integers(10, 150_000, lp).tolist(),
                response_ids=rng.integers(10, 150_000, lr).tolist(),
                response_mask=(rng.random(lr) < 0.95).astype(np.int64).tolist(),
                advantages=float(rng.normal()),
                old_logprobs=(-rng.exponential(1.0, lr)).tolist(),
                ref_logprobs=(-rng.exponential(1.0, lr)).tolist(),
            )
        )
    return samples


def per_sample_loop_build(samples: list[RolloutSample], spec: PayloadSpec) -> dict[str, torch.Tensor]:
    """The baseline: one sample at a time, one tensor per field and sample, then stack."""
    import torch

    P, R, pad = spec.max_prompt_len, spec.max_response_len, spec.pad_token_id
    rows: dict[str, list[torch.Tensor]] = {
        k: []
        for k in (
            "input_ids",
            "attention_mask",
            "position_ids",
            "response_mask",
            "advantages",
            "old_log_probs",
            "ref_log_prob",
        )
    }
    for s in samples:
        prompt = torch.tensor(s.prompt_ids, dtype=torch.int64)
        response = torch.tensor(s.response_ids, dtype=torch.int64)
        lp, lr = prompt.numel(), response.numel()
        left, right = P - lp, R - lr
        rows["input_ids"].append(
            torch.cat([torch.full((left,), pad), prompt, response, torch.full((right,), pad)]).to(torch.int64)
        )
        rows["attention_mask"].append(
            torch.cat(
                [
                    torch.zeros(left, dtype=torch.int64),
                    torch.ones(lp + lr, dtype=torch.int64),
                    torch.zeros(right, dtype=torch.int64),
                ]
            )
        )
        rows["position_ids"].append(
            torch.cat(
                [
                    torch.zeros(left, dtype=torch.int64),
                    torch.arange(lp + lr),
                    torch.zeros(right, dtype=torch.int64),
                ]
            )
        )

        def response_row(values: torch.Tensor, dtype: torch.dtype, right: int = right) -> torch.Tensor:
            return torch.cat([torch.zeros(P, dtype=dtype), values.to(dtype), torch.zeros(right, dtype=dtype)])

        mask = torch.ones(lr, dtype=torch.int64) if s.response_mask is None else torch.tensor(s.response_mask)
        rows["response_mask"].append(response_row(mask, torch.int64))
        rows["advantages"].append(response_row(torch.full((lr,), float(s.advantages)), torch.float32))
        rows["old_log_probs"].append(response_row(torch.tensor(s.old_logprobs), torch.float32))
        rows["ref_log_prob"].append(response_row(torch.tensor(s.ref_logprobs), torch.float32))
    batch = {name: torch.stack(values) for name, values in rows.items()}
    batch["prompts"] = batch["input_ids"][:, :P].contiguous()
    batch["loss_mask"] = batch["response_mask"].clone()
    return batch


def per_row_numpy_fill(samples: list[RolloutSample], spec: PayloadSpec) -> dict[str, Any]:
    """The strongest simple alternative: numpy buffers of the wire's dtypes (int64 ids and positions,
    bool masks, float32 values), filled row by row with slice assignment from the lists."""
    import numpy as np

    P, R, B = spec.max_prompt_len, spec.max_response_len, len(samples)
    ids = np.full((B, P + R), spec.pad_token_id, dtype=np.int64)
    positions = np.zeros((B, P + R), dtype=np.int64)
    attention, mask = (np.zeros((B, P + R), dtype=np.bool_) for _ in range(2))
    advantages, old, ref = (np.zeros((B, P + R), dtype=np.float32) for _ in range(3))
    arange = np.arange(P + R)
    for i, s in enumerate(samples):
        lp, lr = len(s.prompt_ids), len(s.response_ids)
        ids[i, P - lp : P] = s.prompt_ids
        ids[i, P : P + lr] = s.response_ids
        attention[i, P - lp : P + lr] = True
        positions[i, P - lp : P + lr] = arange[: lp + lr]
        mask[i, P : P + lr] = True if s.response_mask is None else s.response_mask
        advantages[i, P : P + lr] = s.advantages
        old[i, P : P + lr] = s.old_logprobs
        ref[i, P : P + lr] = s.ref_logprobs
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "position_ids": positions,
        "response_mask": mask,
        "advantages": advantages,
        "old_log_probs": old,
        "ref_log_prob": ref,
    }


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _same(ours: dict[str, Any], other: dict[str, Any], name: str) -> None:
    """Every tensor the wire sends equals the other builder's, value for value (prompts: its width)."""
    import torch

    for key in ours:
        if key == "prompts":
            same = "prompts" not in other or ours[key].shape[:2] == tuple(other[key].shape)
        else:
            value = torch.as_tensor(other[key])
            same = torch.equal(ours[key].to(value.dtype), value)
        if not same:
            raise AssertionError(f"the {name} and the wire builder disagree on {key!r}")


def run(args: argparse.Namespace) -> BenchResult:
    from arctic_rl_core.wire import PayloadSpec, build_train_payload  # noqa: PLC0415 - CLI start-up

    for name in ("batch", "prompt_len", "response_len", "rounds"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    load = os.getloadavg()[0]
    spec = PayloadSpec(
        pad_token_id=0,
        max_prompt_len=args.prompt_len,
        max_response_len=args.response_len,
        rollout_n=1,
        temperature=1.0,
        use_kl_loss=True,
    )
    samples = make_samples(args.batch, args.prompt_len, args.response_len, args.seed)

    # correctness first: both baselines and ours must agree on every tensor the wire sends
    ours_batch = build_train_payload(samples, spec).batch
    expected = {"input_ids", "attention_mask", "prompts", "position_ids", "response_mask", "advantages"}
    expected |= {"old_log_probs", "ref_log_prob"}
    if set(ours_batch) != expected:
        raise AssertionError(f"the wire builder sent {sorted(ours_batch)}, expected {sorted(expected)}")
    _same(ours_batch, per_sample_loop_build(samples, spec), "per-sample loop")
    _same(ours_batch, per_row_numpy_fill(samples, spec), "numpy row fill")
    tokens = int(ours_batch["attention_mask"].sum())
    del ours_batch

    baseline, ours, numpy_rows = [], [], []
    for _ in range(args.rounds):  # interleaved so all see the same machine load
        numpy_rows.append(_timed(lambda: per_row_numpy_fill(samples, spec))[0])
        ours.append(_timed(lambda: build_train_payload(samples, spec))[0])
        baseline.append(_timed(lambda: per_sample_loop_build(samples, spec))[0])
    B, S = args.batch, args.prompt_len + args.response_len
    ours_label = "wire.build_train_payload (lists packed in C into their rows)"
    return BenchResult(
        title=f"train payload build, B={B}, S={S} (P={args.prompt_len}, R={args.response_len}), best of {args.rounds}",
        baseline_label="numpy row fill (slice assignment from the lists, the wire's dtypes)",
        baseline_seconds=min(numpy_rows),
        ours_label=ours_label,
        ours_seconds=min(ours),
        unit="s",
        extra_rows=[("per-sample torch loop (tensor per field + pad + stack)", f"{min(baseline):.6g}")],
        notes=[f"{tokens} real tokens; the three outputs verified identical tensor by tensor."],
        conditions=serial_conditions(load) + f", best of {args.rounds} interleaved rounds",
        goal="> 1x",
        more=[
            Comparison(
                "per-sample torch loop (the legacy integrations')",
                min(baseline),
                ours_label,
                min(ours),
                "s",
                goal=">= 10x",
            )
        ],
    )

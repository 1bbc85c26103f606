"""`arctic-rl bench wire-bytes`: bytes on the wire per trained token for one BIRD-shaped step.

One GRPO step of the BIRD-32B recipe sends two payloads to the server: the old-log-prob forward
and the forward-backward. Each is encoded with the real DSSST1 codec (`arctic_platform.wire`,
which copies every tensor into the safetensors blob, shared storage included) in three formats:

- the legacy integration's (SkyRL `integrations/arctic_rl/trainer.py`, as its docstrings document
  it): rows padded to the batch's longest prompt and response (the response region stays at the
  configured maximum under ZoRRo), everything int64 but the float tensors; the forward sends
  `input_ids`, `attention_mask`, `prompts` [B, P], `position_ids`; the forward-backward adds
  `responses` [B, R], `response_mask`, `loss_mask` (= `response_mask`, the same tensor),
  `advantages`, `old_log_probs`;
- this repository's builder before the lean wire: every row padded to the configured maxima,
  int64 masks, `prompts` [B, P] int64, `position_ids`, `loss_mask` beside `response_mask`;
- the builder now (`arctic_rl_core.wire`): the batch's own widths rounded up to
  `wire.pad_to_multiple`, bool masks, `prompts` as an empty [B, P, 0], no `position_ids` (the
  server rebuilds them), only the per-token tensors the server's `verl_grpo` loss reads.

Prompt and response lengths are drawn from long-tailed (log-normal) distributions, one prompt
per group of rollouts, responses truncated at the maximum as real rollouts are. A trained token
is a response token (what the loss counts).

Two more comparisons: the lean step against the information it carries (every row's tokens as
int32, its two lengths, and each per-token float the forward-backward sends at its response tokens:
no padding, no masks), and the peak memory of building and encoding the forward-backward payload
(in a fresh process: its peak resident set, reset before, above what it held before) against its
encoded bytes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arctic_rl_testbed.bench.report import BenchResult

if TYPE_CHECKING:
    import numpy as np
    import torch
    from arctic_rl_core.wire import RolloutSample
import gc
import json
import os
import re
import subprocess
import sys

from arctic_rl_testbed.bench.report import Comparison

NAME = "wire-bytes"
HELP = (
    "Bytes on the wire per trained token of a BIRD-shaped GRPO step (forward + forward-backward): "
    "the legacy integration's payload, the previous builder, the lean builder (target >= 3x vs legacy)."
)

# The BIRD-32B recipe's maxima (recipes/configs/bird-qwen3-32b-32gpu.yaml; a test keeps them equal).
RECIPE_MAX_PROMPT_LEN = 6144
RECIPE_MAX_RESPONSE_LEN = 2048
QWEN3_PAD_TOKEN_ID = 151643


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1024, help="rollouts in the step (default 1024)")
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts per prompt (default 16)")
    parser.add_argument("--max-prompt-len", type=int, default=RECIPE_MAX_PROMPT_LEN)
    parser.add_argument("--max-response-len", type=int, default=RECIPE_MAX_RESPONSE_LEN)
    parser.add_argument(
        "--prompt-median",
        type=int,
        default=1800,
        help="median prompt length (BIRD schema prompts; default 1800)",
    )
    parser.add_argument(
        "--response-median", type=int, default=320, help="median response length (default 320)"
    )
    parser.add_argument("--pad-to-multiple", type=int, default=64, help="wire.pad_to_multiple (default 64)")
    parser.add_argument(
        "--no-zorro",
        dest="zorro",
        action="store_false",
        help="ZoRRo off (the recipe has it on: the response width then stays at the maximum)",
    )
    parser.add_argument("--seed", type=int, default=0)


def draw_lengths(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """Per-row prompt and response lengths: log-normal, prompts shared by each group of rollouts,
    clipped to [1, max] (responses at the maximum are truncated rollouts)."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    groups = args.rows // args.rollouts
    prompts = rng.lognormal(np.log(args.prompt_median), 0.45, groups)
    prompt_lens = np.clip(np.rint(prompts), 1, args.max_prompt_len).astype(np.int64).repeat(args.rollouts)
    responses = rng.lognormal(np.log(args.response_median), 0.8, args.rows)
    response_lens = np.clip(np.rint(responses), 1, args.max_response_len).astype(np.int64)
    return prompt_lens, response_lens


def make_samples(args: argparse.Namespace) -> list[RolloutSample]:
    import numpy as np
    from arctic_rl_core.wire import RolloutSample  # noqa: PLC0415 - CLI start-up

    rng = np.random.default_rng(args.seed + 1)
    prompt_lens, response_lens = draw_lengths(args)
    samples, prompt = [], None
    for i, (lp, lr) in enumerate(zip(prompt_lens.tolist(), response_lens.tolist(), strict=True)):
        if i % args.rollouts == 0:
            prompt = rng.integers(10, 150_000, lp)
        samples.append(
            RolloutSample(
                prompt_ids=prompt,
                response_ids=rng.integers(10, 150_000, lr),
                advantages=float(rng.normal()),
                old_logprobs=-rng.exponential(0.5, lr).astype(np.float32),
            )
        )
    return samples


# -- the two earlier formats, rebuilt from their documented layouts -------------------------------


@dataclass(frozen=True)
class _Rows:
    """Left-padded prompts and right-padded responses of a batch at widths P and R."""

    input_ids: np.ndarray  # [B, P+R] int64
    attention_mask: np.ndarray  # [B, P+R] int64
    response_mask: np.ndarray  # [B, P+R] int64, 1 at the response tokens
    advantages: np.ndarray  # [B, P+R] float32
    old_log_probs: np.ndarray  # [B, P+R] float32
    P: int


def _rows(samples: list[RolloutSample], P: int, R: int, pad: int) -> _Rows:
    import numpy as np

    B = len(samples)
    ids = np.full((B, P + R), pad, dtype=np.int64)
    attention = np.zeros((B, P + R), dtype=np.int64)
    response = np.zeros((B, P + R), dtype=np.int64)
    advantages = np.zeros((B, P + R), dtype=np.float32)
    old = np.zeros((B, P + R), dtype=np.float32)
    for i, s in enumerate(samples):
        lp, lr = len(s.prompt_ids), len(s.response_ids)
        ids[i, P - lp : P], ids[i, P : P + lr] = s.prompt_ids, s.response_ids
        attention[i, P - lp : P + lr] = 1
        response[i, P : P + lr] = 1
        advantages[i, P : P + lr] = s.advantages
        old[i, P : P + lr] = s.old_logprobs
    return _Rows(ids, attention, response, advantages, old, P)


def _positions(attention: np.ndarray) -> np.ndarray:
    return (attention.cumsum(axis=1) - 1).clip(min=0) * attention


def legacy_payloads(samples: list[RolloutSample], args: argparse.Namespace) -> tuple[dict, dict]:
    """The legacy integration's forward and forward-backward batches (see the module docstring)."""
    import torch

    P = max(len(s.prompt_ids) for s in samples)
    R = args.max_response_len if args.zorro else max(len(s.response_ids) for s in samples)
    rows = _rows(samples, P, R, QWEN3_PAD_TOKEN_ID)
    ids = torch.from_numpy(rows.input_ids)
    attention = torch.from_numpy(rows.attention_mask)
    model_inputs = {
        "input_ids": ids,
        "attention_mask": attention,
        "prompts": ids[:, :P],
        "position_ids": torch.from_numpy(_positions(rows.attention_mask)),
    }
    response_mask = torch.from_numpy(rows.response_mask)
    train = dict(
        model_inputs,
        responses=ids[:, P:],
        response_mask=response_mask,
        loss_mask=response_mask,
        advantages=torch.from_numpy(rows.advantages),
        old_log_probs=torch.from_numpy(rows.old_log_probs),
    )
    return model_inputs, train


def previous_builder_payloads(samples: list[RolloutSample], args: argparse.Namespace) -> tuple[dict, dict]:
    """This repository's builder before the lean wire: the configured maxima, int64 masks."""
    import torch

    P, R = args.max_prompt_len, args.max_response_len
    rows = _rows(samples, P, R, QWEN3_PAD_TOKEN_ID)
    ids = torch.from_numpy(rows.input_ids)
    model_inputs = {
        "input_ids": ids,
        "attention_mask": torch.from_numpy(rows.attention_mask),
        "prompts": ids[:, :P].contiguous(),
        "position_ids": torch.from_numpy(_positions(rows.attention_mask)),
    }
    response_mask = torch.from_numpy(rows.response_mask)
    train = dict(
        model_inputs,
        response_mask=response_mask,
        loss_mask=response_mask,
        advantages=torch.from_numpy(rows.advantages),
        old_log_probs=torch.from_numpy(rows.old_log_probs),
    )
    return model_inputs, train


def lean_spec(args: argparse.Namespace) -> Any:
    """The lean builder's `PayloadSpec` for the step's shape."""
    from arctic_rl_core.wire import PayloadSpec  # noqa: PLC0415 - CLI start-up

    return PayloadSpec(
        pad_token_id=QWEN3_PAD_TOKEN_ID,
        max_prompt_len=args.max_prompt_len,
        max_response_len=args.max_response_len,
        rollout_n=args.rollouts,
        temperature=1.0,
        zorro_train_enable=args.zorro,
        drop_position_ids=True,
        pad_to_multiple=args.pad_to_multiple,
    )


def lean_payloads(samples: list[RolloutSample], args: argparse.Namespace) -> tuple[Any, Any]:
    from arctic_rl_core.wire import build_forward_payload, build_train_payload  # noqa: PLC0415 - CLI start-up

    spec = lean_spec(args)
    return build_forward_payload(samples, spec), build_train_payload(samples, spec)


def encoded_bytes(batch: dict[str, torch.Tensor], meta: dict, processing: dict) -> int:
    """Length of the request body the client sends: DSSST1 of {batch, meta, processing}."""
    try:
        from arctic_platform import wire
    except ImportError as exc:  # pragma: no cover - the extra is part of the CPU test environments
        raise RuntimeError(
            "arctic-rl bench wire-bytes encodes with the real DSSST1 codec: install "
            "arctic-rl-core[transport] (arctic-platform[transport]==0.1.4)"
        ) from exc
    return len(wire.dumps({"batch": batch, "meta": meta, "processing": processing}))


@dataclass(frozen=True)
class StepBytes:
    label: str
    forward: int
    forward_backward: int

    @property
    def total(self) -> int:
        return self.forward + self.forward_backward


def measure(args: argparse.Namespace) -> tuple[list[StepBytes], int]:
    """Encoded bytes of the three formats and the number of trained tokens."""
    samples = make_samples(args)
    trained = sum(len(s.response_ids) for s in samples)
    forward, train = lean_payloads(samples, args)
    results = []
    # every format is encoded with the same meta/processing (a few KB): the batches differ
    for label, build in (
        ("legacy integration (SkyRL integrations/arctic_rl)", legacy_payloads),
        ("previous builder (configured maxima, int64 masks)", previous_builder_payloads),
    ):
        fwd_batch, train_batch = build(samples, args)
        fwd = encoded_bytes(fwd_batch, forward.meta, forward.processing)
        del fwd_batch
        bwd = encoded_bytes(train_batch, train.meta, train.processing)
        del train_batch
        results.append(StepBytes(label, fwd, bwd))
    results.append(
        StepBytes(
            f"lean builder (pad_to_multiple={args.pad_to_multiple})",
            encoded_bytes(forward.batch, forward.meta, forward.processing),
            encoded_bytes(train.batch, train.meta, train.processing),
        )
    )
    return results, trained


def information_bytes(samples: list[RolloutSample], float_fields: int) -> tuple[int, int]:
    """(forward, forward-backward): what the payloads carry without padding: each row's tokens as int32
    and its prompt and response lengths (int32), and `float_fields` float32 values per response token."""
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    forward = 4 * tokens + 8 * len(samples)
    return forward, forward + 4 * float_fields * sum(len(s.response_ids) for s in samples)


def _status_bytes(field: str) -> int:
    """A `/proc/self/status` memory field (VmRSS, VmHWM) in bytes."""

    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+) kB", status.read()).group(1)) * 1024


def peak_in_this_process(args: argparse.Namespace) -> tuple[int, int] | None:
    """(peak bytes above the resident set before, encoded bytes) of building the lean forward-backward
    payload and encoding it, in this process; None where the peak cannot be reset (Linux
    /proc/self/clear_refs). Meaningful in a fresh process only: one that freed memory before may reuse
    it without a new resident page (`build_and_encode_peak` runs it in one)."""

    from arctic_rl_core.wire import build_train_payload  # noqa: PLC0415 - CLI start-up

    samples, spec = make_samples(args), lean_spec(args)
    warm = build_train_payload(samples[: args.rollouts], spec)  # imports (torch, the codec) before the peak
    encoded_bytes(warm.batch, warm.meta, warm.processing)
    del warm
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak resident set (VmHWM) to the current one
    except OSError:
        return None
    before = _status_bytes("VmRSS")
    train = build_train_payload(samples, spec)
    encoded = encoded_bytes(train.batch, train.meta, train.processing)
    return _status_bytes("VmHWM") - before, encoded


def build_and_encode_peak(args: argparse.Namespace) -> tuple[int, int] | None:
    """`peak_in_this_process` in a fresh Python process (the same samples: they come from `args`)."""

    code = (
        "import argparse, json, sys\n"
        "from arctic_rl_testbed.bench import wire_bytes\n"
        "args = argparse.Namespace(**json.loads(sys.argv[1]))\n"
        "print(json.dumps(wire_bytes.peak_in_this_process(args)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(vars(args), default=str)],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = json.loads(out.stdout.strip().splitlines()[-1])
    return None if peak is None else (int(peak[0]), int(peak[1]))


def run(args: argparse.Namespace) -> BenchResult:

    for name in (
        "rows",
        "rollouts",
        "max_prompt_len",
        "max_response_len",
        "prompt_median",
        "response_median",
    ):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    if args.rows % args.rollouts:
        raise ValueError(
            f"--rows={args.rows} is not a multiple of --rollouts={args.rollouts}: send whole groups"
        )
    load = os.getloadavg()[0]
    results, trained = measure(args)
    legacy, _previous, lean = results
    samples = make_samples(args)
    peak = build_and_encode_peak(args)
    info_fwd, info_train = information_bytes(samples, float_fields=_float_fields(samples, args))

    def per_token(n: int) -> str:
        return f"{n / trained:,.0f} B/token"

    rows = []
    for r in results:
        rows.append((f"{r.label}: forward", f"{r.forward:,} ({per_token(r.forward)})"))
        rows.append(
            (f"{r.label}: forward-backward", f"{r.forward_backward:,} ({per_token(r.forward_backward)})")
        )
        rows.append((f"{r.label}: both", f"{r.total:,} ({per_token(r.total)})"))
    zorro = "on (response width = max_response_len)" if args.zorro else "off"
    return BenchResult(
        title=(
            f"bytes on the wire, one GRPO step: {args.rows} rows, {args.rollouts} rollouts/prompt, "
            f"maxima P={args.max_prompt_len} R={args.max_response_len}, ZoRRo {zorro}"
        ),
        baseline_label=f"{legacy.label}: both",
        baseline_seconds=float(legacy.total),
        ours_label=f"{lean.label}: both",
        ours_seconds=float(lean.total),
        unit="bytes",
        quantity="bytes",
        extra_rows=rows,
        notes=[
            f"{trained:,} trained (response) tokens; every payload encoded with arctic_platform.wire (DSSST1).",
            f"forward ratio {legacy.forward / lean.forward:.2f}x, forward-backward ratio "
            f"{legacy.forward_backward / lean.forward_backward:.2f}x (legacy / lean). Target: >= 3x.",
        ],
        conditions=f"bytes, not time; load {load:.1f}",
        goal=">= 3x",
        more=[
            Comparison(
                "information: int32 tokens, two lengths per row, per-token floats, no padding",
                float(info_fwd + info_train),
                f"{lean.label}: both",
                float(lean.total),
                unit="bytes",
                goal=">= 0.83x (within 1.2x)",
            ),
            *(
                []
                if peak is None
                else [
                    Comparison(
                        "the forward-backward payload's encoded bytes",
                        float(peak[1]),
                        "peak memory of building + encoding it (above the resident set before)",
                        float(max(peak[0], 1)),
                        unit="bytes",
                        goal=">= 0.83x (peak within 1.2x)",
                    )
                ]
            ),
        ],
    )


def _float_fields(samples: list[RolloutSample], args: argparse.Namespace) -> int:
    """How many float tensors the lean forward-backward payload sends (advantages, old log-probs, ...)."""
    _, train = lean_payloads(samples[: args.rollouts], args)
    batches = train.batch if isinstance(train.batch, list) else [train.batch]
    return sum(1 for key, value in batches[0].items() if value.dtype.is_floating_point)

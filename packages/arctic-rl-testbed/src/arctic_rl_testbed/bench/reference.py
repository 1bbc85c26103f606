"""Throughput of the reference engine with its default tiny model: generate tokens/s (batched, KV
cache) against a naive sampler (one prompt at a time, full forward per token, no cache), and
forward-backward tokens/s: `arctic-rl bench reference`."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_testbed.bench.report import BenchResult

NAME = "reference"
HELP = (
    "Reference engine throughput: batched KV-cache sampling vs a naive per-prompt sampler; fwd-bwd tokens/s."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=16, help="prompts per generate call / rows per payload")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=64, help="generated tokens (and response length)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions (after one warm-up)")
    parser.add_argument(
        "--num-threads", type=int, default=1, help="torch CPU threads (the engine's default: 1)"
    )


def run(args: argparse.Namespace) -> BenchResult:
    import torch
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

    from arctic_rl_testbed.bench.report import BenchResult
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    engine = ReferenceBackend(ReferenceEngineSettings(num_threads=args.num_threads))
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(10, engine.vocab_size - 10, (args.batch, args.prompt_len), generator=g).tolist()
    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=1)

    async def generate():
        return await engine.generate(prompts, params)

    out = asyncio.run(generate())  # warm-up, and the sequences the naive sampler reproduces
    start = time.perf_counter()
    for _ in range(args.repeats):
        out = asyncio.run(generate())
    ours = (time.perf_counter() - start) / args.repeats
    generated = sum(c.generation_len for c in out.completions)

    start = time.perf_counter()
    with torch.no_grad():
        for prompt, completion in zip(prompts, out.completions, strict=True):
            sequence = list(prompt)
            for token in completion.token_ids:  # full forward over the growing sequence, no KV cache
                engine._sampler(input_ids=torch.tensor([sequence])).logits[0, -1].argmax()
                sequence.append(token)
    naive = time.perf_counter() - start

    spec = PayloadSpec(
        pad_token_id=engine.pad_token_id,
        max_prompt_len=args.prompt_len,
        max_response_len=args.new_tokens,
        rollout_n=1,
        temperature=1.0,
    )
    samples = [
        RolloutSample(
            prompt_ids=p,
            response_ids=list(c.token_ids),
            advantages=1.0,
            old_logprobs=[-5.0] * c.generation_len,
        )
        for p, c in zip(prompts, out.completions, strict=True)
    ]
    payload = build_train_payload(samples, spec)
    tokens = int(payload.batch["attention_mask"].sum())

    async def train_step():
        await engine.forward_backward(payload)
        await engine.step()

    asyncio.run(train_step())
    start = time.perf_counter()
    for _ in range(args.repeats):
        asyncio.run(engine.forward_backward(payload))
        asyncio.run(engine.step())
    train = (time.perf_counter() - start) / args.repeats
    asyncio.run(engine.shutdown())
    return BenchResult(
        title=f"reference engine, default tiny model ({args.batch} x {args.prompt_len}+{args.new_tokens} tokens)",
        baseline_label=f"naive sampler, per prompt, no KV cache ({generated / naive:.0f} tok/s)",
        baseline_seconds=naive,
        ours_label=f"batched KV-cache sampler ({generated / ours:.0f} tok/s)",
        ours_seconds=ours,
        extra_rows=[
            ("generated tokens", str(generated)),
            ("forward-backward + step (s)", f"{train:.4g}"),
            ("forward-backward tokens/s", f"{tokens / train:.0f}"),
            ("torch threads", str(torch.get_num_threads())),
        ],
    )

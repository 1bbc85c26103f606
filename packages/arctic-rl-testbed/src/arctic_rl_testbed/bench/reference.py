"""Throughput of the reference engine with its default tiny model: `arctic-rl bench reference`.

Ours: the reference sampler (`arctic_rl_testbed.reference.sampler`: a batch of left-padded prompts, KV cache,
vLLM's per-request sampling semantics and log-probs). Baselines, in the same run, with the same model
object, prompts, token budget and torch threads:

- the strongest simple alternative: Hugging Face `model.generate` on the same batch (KV cache,
  multinomial sampling at the same temperature, top-k and top-p off, no early stop), seconds per
  generated token;
- a naive sampler (one prompt at a time, a full forward per token, no cache).

Also reported: forward-backward + step tokens/s of the reference trainer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from arctic_rl_testbed.bench.conditions import serial_conditions
from arctic_rl_testbed.bench.report import BenchResult, Comparison

NAME = "reference"
HELP = (
    "Reference sampler throughput vs Hugging Face generate and a naive per-prompt sampler; fwd-bwd tokens/s."
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
    from arctic_rl_core.backends.protocol import SamplingParams  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload  # noqa: PLC0415 - CLI start-up

    from arctic_rl_testbed.reference.engine import ReferenceBackend  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings  # noqa: PLC0415 - CLI start-up

    engine = ReferenceBackend(ReferenceEngineSettings(num_threads=args.num_threads))
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(10, engine.vocab_size - 10, (args.batch, args.prompt_len), generator=g).tolist()
    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=1)

    async def generate():
        return await engine.generate(prompts, params)

    load = os.getloadavg()[0]
    out = asyncio.run(generate())  # warm-up, and the sequences the naive sampler reproduces
    generated = sum(c.generation_len for c in out.completions)
    hf_generate(engine._sampler, prompts, args.new_tokens, engine.pad_token_id, args.num_threads)  # warm-up
    ours_s, hf_s = [], []
    for _ in range(args.repeats):  # interleaved, best of each
        start = time.perf_counter()
        out = asyncio.run(generate())
        ours_s.append((time.perf_counter() - start) / sum(c.generation_len for c in out.completions))
        start = time.perf_counter()
        hf_tokens = hf_generate(
            engine._sampler, prompts, args.new_tokens, engine.pad_token_id, args.num_threads
        )
        hf_s.append((time.perf_counter() - start) / hf_tokens)
    ours, hf = min(ours_s), min(hf_s)

    start = time.perf_counter()
    with torch.no_grad():
        for prompt, completion in zip(prompts, out.completions, strict=True):
            sequence = list(prompt)
            for token in completion.token_ids:  # full forward over the growing sequence, no KV cache
                engine._sampler(input_ids=torch.tensor([sequence])).logits[0, -1].argmax()
                sequence.append(token)
    naive = (time.perf_counter() - start) / generated

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
    ours_label = f"reference sampler, batched, KV cache ({1 / ours:.0f} tok/s)"
    return BenchResult(
        title=f"reference engine, default tiny model ({args.batch} x {args.prompt_len}+{args.new_tokens} tokens)",
        baseline_label=f"Hugging Face generate, batched, KV cache ({1 / hf:.0f} tok/s)",
        baseline_seconds=hf * 1e6,
        ours_label=ours_label,
        ours_seconds=ours * 1e6,
        unit="us per token",
        extra_rows=[
            (f"naive sampler, per prompt, no KV cache ({1 / naive:.0f} tok/s)", f"{naive * 1e6:.6g}"),
            ("generated tokens per call", str(generated)),
            ("forward-backward + step (s)", f"{train:.4g}"),
            ("forward-backward tokens/s", f"{tokens / train:.0f}"),
            ("torch threads", str(torch.get_num_threads())),
        ],
        conditions=serial_conditions(load) + f", best of {args.repeats} interleaved rounds",
        more=[
            Comparison(
                "naive sampler, per prompt, no KV cache", naive * 1e6, ours_label, ours * 1e6, "us per token"
            )
        ],
    )


def hf_generate(model, prompts: list[list[int]], new_tokens: int, pad_token_id: int, num_threads: int) -> int:
    """Hugging Face `generate` on the batch (left-padded, KV cache, multinomial sampling at
    temperature 1, top-k / top-p off, exactly `new_tokens` tokens); returns the tokens generated."""
    import torch

    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt)
        attention[i, width - len(prompt) :] = 1
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=pad_token_id,
            )
    finally:
        torch.set_num_threads(previous)
    return int(out.shape[0] * (out.shape[1] - width))

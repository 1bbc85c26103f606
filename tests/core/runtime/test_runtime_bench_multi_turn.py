"""`arctic-rl bench multi-turn`: both modes run the same trajectories (token for token) with the turn
structure the workload defines, the turn-synchronous baseline in one round of calls per turn, the
continuous mode through the batcher (every turn a request); the last line.
Timings are measured, never asserted."""

from __future__ import annotations

import argparse
import asyncio
import math
import re

import pytest
from arctic_rl_core.cli import main as cli_main
from arctic_rl_testbed.bench import multi_turn

SMALL = [
    "--trajectories", "12", "--max-turns", "4", "--max-batch", "4", "--prompt-len", "5",
    "--response-len", "3", "--observation-len", "2", "--env-latency-ms", "2", "--hidden", "32",
    "--layers", "1", "--repeats", "1", "--seed", "3",
]  # fmt: skip


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    multi_turn.add_arguments(parser)
    return parser.parse_args(argv)


def test_skewed_turn_counts_follow_one_over_t_squared():
    import numpy as np

    turns = multi_turn.skewed_turns(np.random.default_rng(0), 20_000, 4)
    shares = [turns.count(t) / len(turns) for t in (1, 2, 3, 4)]
    total = sum(1 / t**2 for t in (1, 2, 3, 4))
    assert shares == pytest.approx([1 / t**2 / total for t in (1, 2, 3, 4)], abs=0.01)


def test_both_modes_run_the_same_trajectories_with_the_workloads_turns():
    args = _args(SMALL)

    async def scenario():
        from arctic_rl_core.backends.protocol import SamplingParams

        engine = multi_turn._engine(args)
        try:
            vocab = int(engine.vocab_size)
            trajectories = multi_turn.workload(args, vocab, 0.002)
            params = SamplingParams(max_tokens=args.response_len, seed=args.seed)
            kw = {"max_batch": args.max_batch, "vocab": vocab}
            sync = await multi_turn.run_turn_synchronous(engine, trajectories, params, **kw)
            fast = await multi_turn.run_continuous(engine, trajectories, params, **kw)
            return trajectories, sync, fast
        finally:
            await engine.shutdown()

    trajectories, sync, fast = asyncio.run(scenario())
    assert sync.sequences == fast.sequences  # the same tokens, whatever shared a call
    assert len({t.turns for t in trajectories}) > 1  # skewed: not all the same
    for t, sequence in zip(trajectories, fast.sequences, strict=True):
        assert sequence[: len(t.prompt)] == t.prompt
        # each turn adds 1..response_len sampled tokens, each environment step its observation
        grown = len(sequence) - len(t.prompt) - (t.turns - 1) * args.observation_len
        assert t.turns <= grown <= t.turns * args.response_len
    live = [sum(t.turns > k for t in trajectories) for k in range(args.max_turns)]
    assert sync.sampler_calls == sum(math.ceil(n / args.max_batch) for n in live)
    assert fast.queue.requests == sum(t.turns for t in trajectories)
    assert fast.queue.in_flight_max <= args.max_batch and fast.queue.calls == fast.sampler_calls


def test_the_command_prints_the_table_and_a_ratio_or_why_there_is_none(capsys):
    assert cli_main.main(["bench", "multi-turn", *SMALL]) == 0
    out = capsys.readouterr().out
    assert re.search(r"same trajectories in both modes.*│\s*12 of 12\s*│", out)
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"ratio: \d+\.\d\dx", last) or re.fullmatch(r"ratio: not measured \(.+\)", last)

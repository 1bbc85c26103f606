"""Multi-turn rollouts on the reference backend: trajectories/s with continuous per-trajectory turns
against the same trajectories run turn-synchronously, in one run: `arctic-rl bench multi-turn`.

The workload is a step's worth of agent trajectories: `--trajectories` of them, each with its own
random prompt, a turn count drawn from a skewed distribution (P(t) proportional to 1/t^2 up to
`--max-turns`: most answer in one or two turns, a few use many) and, after each turn but the last, an
environment step (a remote tool or SQL sandbox: a wait, not local CPU, drawn per trajectory and turn
from a log-normal with median `--env-latency-ms` and shape `--env-sigma`) whose observation tokens are
appended to the context before the next turn. The median latency is `--env-scale` times one full
sampler call (`--max-batch` first prompts, timed before the runs), so that waiting and sampling keep
the same proportion on a fast or a slow machine (a turn of an LLM agent and a SQL query or a search
call are of the same order); `--env-latency-ms` fixes it instead. Everything is drawn from `--seed`; every request
samples with the same seed, and the reference sampler draws each prompt from its own generator seeded
with it, so a trajectory's tokens do not depend on which other prompts share its call: both modes run
the same trajectories (checked, reported).

- baseline, turn-synchronous: every live trajectory's turn k (calls of at most `--max-batch` prompts,
  one after the other), then all their environment steps, then turn k + 1;
- ours, continuous: every trajectory runs as its own coroutine, each turn's request sent the moment its
  environment step returns, through `arctic_rl_core.generate_batcher` (the reference sampler serves one
  call at a time: requests that arrive meanwhile go together when it returns, up to `--max-batch`).

The sampler runs in its own process (`sampler_process`, one torch thread), so it holds one core while
this process schedules: with a second core busy elsewhere both modes slow down by different amounts
and the ratio says nothing about the scheduling. The benchmark checks two free cores (the two-thread
kernel check of `bench async`, before and after) and the load average, and when they are not met
prints why instead of a ratio. Both modes run `--repeats` times, alternating; the best of each counts.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend, SamplingParams
    from arctic_rl_core.generate_batcher import SamplerQueueStats

from arctic_rl_testbed.bench.conditions import ParallelConditions
from arctic_rl_testbed.bench.report import BenchResult

NAME = "multi-turn"
HELP = (
    "Multi-turn rollouts: trajectories/s with continuous per-trajectory turns vs turn-synchronous, "
    "skewed turn counts, reference backend (target >= 1.5x)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trajectories", type=int, default=128, help="trajectories (default 128)")
    parser.add_argument("--max-turns", type=int, default=8, help="most turns of a trajectory (default 8)")
    parser.add_argument(
        "--max-batch", type=int, default=32, help="most prompts per sampler call (vLLM's max_num_seqs; 32)"
    )
    parser.add_argument("--prompt-len", type=int, default=16, help="first prompt tokens (default 16)")
    parser.add_argument("--response-len", type=int, default=16, help="tokens per turn (default 16)")
    parser.add_argument(
        "--observation-len", type=int, default=8, help="observation tokens per environment step (default 8)"
    )
    parser.add_argument(
        "--env-scale",
        type=float,
        default=1.0,
        help="median environment step latency as a multiple of one full sampler call (default 1)",
    )
    parser.add_argument(
        "--env-latency-ms",
        type=float,
        default=None,
        help="median environment step latency in ms (overrides --env-scale)",
    )
    parser.add_argument(
        "--env-sigma",
        type=float,
        default=1.0,
        help="log-normal shape of the latency (0: constant; default 1)",
    )
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the tiny model (default 64)")
    parser.add_argument("--layers", type=int, default=2, help="layers of the tiny model (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the workload and the sampling (default 0)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each mode, alternating; best counts")


@dataclass(frozen=True)
class Trajectory:
    """One trajectory of the workload: what both modes run."""

    index: int
    prompt: tuple[int, ...]
    turns: int
    latencies_s: tuple[float, ...]  # the environment step after each turn but the last
    observation_len: int

    def observation(self, turn: int, vocab: int) -> list[int]:
        """The environment's observation after `turn` (deterministic; what a tool would answer)."""
        digest = hashlib.sha256(f"{self.index}:{turn}".encode()).digest()
        return [3 + digest[i % len(digest)] % (vocab - 3) for i in range(self.observation_len)]


def skewed_turns(rng: Any, count: int, max_turns: int) -> list[int]:
    """Turn counts with P(t) proportional to 1/t^2 for t = 1..max_turns."""
    weights = [1.0 / t**2 for t in range(1, max_turns + 1)]
    total = sum(weights)
    return [int(t) for t in rng.choice(range(1, max_turns + 1), size=count, p=[w / total for w in weights])]


def workload(args: argparse.Namespace, vocab: int, median_latency_s: float) -> list[Trajectory]:
    import numpy as np

    rng = np.random.default_rng(args.seed)
    turns = skewed_turns(rng, args.trajectories, args.max_turns)
    out = []
    for i, t in enumerate(turns):
        prompt = tuple(int(x) for x in rng.integers(3, vocab, size=args.prompt_len))
        median = median_latency_s
        latencies = tuple(
            float(median * math.exp(args.env_sigma * rng.standard_normal())) for _ in range(t - 1)
        )
        out.append(Trajectory(i, prompt, t, latencies, args.observation_len))
    return out


@dataclass
class ModeRun:
    name: str
    wall_s: float
    sequences: list[tuple[int, ...]]  # each trajectory's final context, in workload order
    sampler_calls: int
    sampler_busy_s: float
    queue: SamplerQueueStats | None = None

    def trajectories_per_s(self) -> float:
        return len(self.sequences) / self.wall_s


async def _environment_step(trajectory: Trajectory, turn: int, vocab: int) -> list[int]:
    await asyncio.sleep(trajectory.latencies_s[turn])
    return trajectory.observation(turn, vocab)


async def run_turn_synchronous(
    backend: Backend, trajectories: list[Trajectory], params: SamplingParams, *, max_batch: int, vocab: int
) -> ModeRun:
    """All live trajectories' turn k (calls of at most max_batch, one after the other), then all their
    environment steps, then turn k + 1."""
    contexts = [list(t.prompt) for t in trajectories]
    calls, busy = 0, 0.0
    start = time.perf_counter()
    for turn in range(max(t.turns for t in trajectories)):
        live = [t for t in trajectories if t.turns > turn]
        for first in range(0, len(live), max_batch):
            chunk = live[first : first + max_batch]
            called = time.perf_counter()
            out = await backend.generate([contexts[t.index] for t in chunk], params)
            busy += time.perf_counter() - called
            calls += 1
            for t, completion in zip(chunk, out.completions, strict=True):
                contexts[t.index].extend(completion.token_ids)
        stepping = [t for t in live if t.turns > turn + 1]
        observations = await asyncio.gather(*(_environment_step(t, turn, vocab) for t in stepping))
        for t, observation in zip(stepping, observations, strict=True):
            contexts[t.index].extend(observation)
    wall = time.perf_counter() - start
    return ModeRun("turn-synchronous", wall, [tuple(c) for c in contexts], calls, busy)


async def run_continuous(
    backend: Backend, trajectories: list[Trajectory], params: SamplingParams, *, max_batch: int, vocab: int
) -> ModeRun:
    """Every trajectory its own coroutine; each turn's request goes through the batcher the moment the
    environment step before it returns."""
    from arctic_rl_core.generate_batcher import GenerateBatcher  # noqa: PLC0415 - CLI start-up

    batcher = GenerateBatcher(
        backend.generate, max_batch=max_batch, max_calls_in_flight=backend.max_generate_calls_in_flight
    )

    async def trajectory(t: Trajectory) -> tuple[int, ...]:
        context = list(t.prompt)
        for turn in range(t.turns):
            served = await batcher.generate(list(context), params)
            context.extend(served.completion.token_ids)
            if turn + 1 < t.turns:
                context.extend(await _environment_step(t, turn, vocab))
        return tuple(context)

    start = time.perf_counter()
    sequences = await asyncio.gather(*(trajectory(t) for t in trajectories))
    wall = time.perf_counter() - start
    queue = batcher.take_stats()
    return ModeRun("continuous", wall, list(sequences), queue.calls, queue.busy_s, queue)


def _engine(args: argparse.Namespace) -> Any:
    from arctic_rl_core.config.reference_model import ReferenceModelConfig  # noqa: PLC0415 - CLI start-up

    from arctic_rl_testbed.reference.engine import ReferenceBackend  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings  # noqa: PLC0415 - CLI start-up

    longest = args.prompt_len + args.max_turns * (args.response_len + args.observation_len)
    model = ReferenceModelConfig(
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_layers=args.layers,
        max_position_embeddings=max(256, 2 * longest),
    )
    settings = ReferenceEngineSettings(model=model, seed=args.seed, colocated=False, sampler_process=True)
    return ReferenceBackend(settings)


@dataclass
class BothModes:
    turn_synchronous: list[ModeRun]
    continuous: list[ModeRun]
    trajectories: list[Trajectory]
    full_call_s: float  # one call of max_batch first prompts, best of three
    median_latency_s: float


async def _run_both(args: argparse.Namespace) -> BothModes:
    from arctic_rl_core.backends.protocol import SamplingParams  # noqa: PLC0415 - CLI start-up

    engine = _engine(args)
    try:
        vocab = int(engine.vocab_size)
        params = SamplingParams(max_tokens=args.response_len, temperature=1.0, seed=args.seed)
        probe = workload(args, vocab, 0.0)[: args.max_batch]
        timings = []
        for _ in range(3):  # the first also warms up
            started = time.perf_counter()
            await engine.generate([list(t.prompt) for t in probe], params)
            timings.append(time.perf_counter() - started)
        full_call = min(timings)
        median = (
            args.env_latency_ms / 1000.0 if args.env_latency_ms is not None else args.env_scale * full_call
        )
        trajectories = workload(args, vocab, median)
        kw = {"max_batch": args.max_batch, "vocab": vocab}
        sync_runs, continuous_runs = [], []
        for _ in range(args.repeats):
            sync_runs.append(await run_turn_synchronous(engine, trajectories, params, **kw))
            continuous_runs.append(await run_continuous(engine, trajectories, params, **kw))
        return BothModes(sync_runs, continuous_runs, trajectories, full_call, median)
    finally:
        await engine.shutdown()


def run(args: argparse.Namespace) -> BenchResult:
    if args.trajectories < 2 or args.max_turns < 2 or args.repeats < 1:
        raise SystemExit("--trajectories and --max-turns: give at least 2; --repeats at least 1")
    with ParallelConditions() as machine:
        both = asyncio.run(_run_both(args))
    sync_runs, continuous_runs, trajectories = both.turn_synchronous, both.continuous, both.trajectories
    checks, load = machine.result.checks, machine.result.load
    sync = min(sync_runs, key=lambda r: r.wall_s)
    fast = min(continuous_runs, key=lambda r: r.wall_s)
    same = sum(a == b for a, b in zip(sync.sequences, fast.sequences, strict=True))
    turns = [t.turns for t in trajectories]
    histogram = ", ".join(f"{t}: {turns.count(t)}" for t in sorted(set(turns)))
    queue = fast.queue
    assert queue is not None
    rows = [
        (
            "trajectories/s: turn-synchronous; continuous",
            f"{sync.trajectories_per_s():.1f}; {fast.trajectories_per_s():.1f}",
        ),
        ("turn counts (turns: trajectories)", histogram),
        (
            "one full sampler call; environment step median (s)",
            f"{both.full_call_s:.3f}; {both.median_latency_s:.3f}",
        ),
        ("sampler calls: turn-synchronous; continuous", f"{sync.sampler_calls}; {fast.sampler_calls}"),
        (
            "sampler busy share of the wall time: turn-synchronous; continuous",
            f"{sync.sampler_busy_s / sync.wall_s:.0%}; {fast.sampler_busy_s / fast.wall_s:.0%}",
        ),
        (
            "continuous queue: waiting mean / max; in flight mean / max; prompts per call",
            f"{queue.waiting_mean:.1f} / {queue.waiting_max}; {queue.in_flight_mean:.1f} / {queue.in_flight_max}; "
            f"{queue.batch_size_mean:.1f}",
        ),
        ("same trajectories in both modes (identical tokens)", f"{same} of {len(trajectories)}"),
        (
            "runs per mode (best counts): turn-synchronous; continuous (s)",
            "; ".join(", ".join(f"{r.wall_s:.2f}" for r in runs) for runs in (sync_runs, continuous_runs)),
        ),
        (
            "two-core check before; after (~2 = two free cores); load average before",
            f"{checks[0]:.2f}x; {checks[1]:.2f}x; {load:.1f}",
        ),
    ]
    notes = []
    if same != len(trajectories):
        notes.append(
            f"{len(trajectories) - same} trajectories differ between the modes (a token flipped by float "
            "rounding in a different batch): the work compared is not exactly the same"
        )
    return BenchResult(
        title=(
            f"multi-turn rollouts, reference backend ({args.trajectories} trajectories, up to {args.max_turns} turns "
            f"of {args.response_len} tokens, observations of {args.observation_len}, environment steps "
            f"{both.median_latency_s * 1000:.0f} ms median (log-normal sigma {args.env_sigma:g}), at most {args.max_batch} "
            f"prompts a call, hidden {args.hidden} x {args.layers} layers)"
        ),
        baseline_label="turn-synchronous: all trajectories' turn k, then k + 1 (s for the workload)",
        baseline_seconds=sync.wall_s,
        ours_label="continuous: each turn sent when its environment step returns, batched (s)",
        ours_seconds=fast.wall_s,
        extra_rows=rows,
        notes=notes,
        unmet_conditions=machine.result.unmet,
        conditions=machine.result.describe(),
        goal=">= 1.5x",
    )

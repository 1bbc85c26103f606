"""The overlapped loop of asynchronous GRPO: generation of the next batches, with the weights the
sampler serves, runs while the current batch trains, bounded by `async.max_staleness` k.

Two tasks on one event loop, each awaiting its own side of the backend (the reference engine runs them
on two threads; the Arctic server on its sampling and training jobs):

- the generator produces a batch as soon as the sampler serves a weights version v within k of the
  trainer version the batch can at most be trained at (`StalenessGate.may_start`): the trainer's
  version now plus one per batch ahead of it not yet done. Without drops that is batch i at version
  i: k = 0 waits for the sync after step i - 1, the synchronous order exactly (generate, train, sync,
  generate, ...); k = 1 samples batch i while step i - 1 trains. A batch dropped whole trains nothing,
  moves no version and frees its place, so drops never stall the generator;
- the trainer takes the batches in order, passes each through the gate at its trainer version s (a
  group older than k is dropped, or regenerated with the current weights, by policy), checks every
  group once more (`assert_within`: nothing older than k is ever trained), trains, and the weight sync
  at the end of its step (a batch boundary) raises the version the generator waits for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from arctic_rl_core.async_grpo.metrics import step_metrics
from arctic_rl_core.async_grpo.staleness import StalenessGate

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.is_weights import ISWeightStats
    from arctic_rl_core.backends.protocol import Completion


@dataclass(frozen=True)
class RolloutGroup[P]:
    """The completions of one prompt (a GRPO group) and the weights version they were sampled with."""

    prompt: P
    completions: tuple[Completion, ...]
    weights_version: int


@dataclass(frozen=True)
class TrainResult:
    """What the driver's train callable returns: its metrics, the weights version the sampler serves
    after the step's weight sync, and the statistics of the IS weights it sent (None: none sent)."""

    metrics: dict[str, float]
    weights_version: int
    is_stats: ISWeightStats | None = None


@dataclass(frozen=True)
class StepRecord:
    """One trained batch: its index, the trainer version it trained at, every trained group's weights
    version, the metrics (the driver's plus `async/*`) and when each phase ran (perf_counter seconds)."""

    step: int
    trainer_version: int
    group_versions: tuple[int, ...]
    metrics: dict[str, float]
    generation_interval: tuple[float, float]
    training_interval: tuple[float, float]
    trained: bool = True  # False: every group was dropped, no optimizer step


type GenerateFn[P] = Callable[[Sequence[P]], Awaitable[list[RolloutGroup[P]]]]
type TrainFn[P] = Callable[[int, list[RolloutGroup[P]]], Awaitable[TrainResult]]


@dataclass
class _Produced[P]:
    step: int
    groups: list[RolloutGroup[P]]
    interval: tuple[float, float]


@dataclass
class AsyncRolloutPipeline[P]:
    """Runs `steps` batches. `prompts_for_step(i)` gives batch i's prompts; `generate(prompts)` samples
    one group per prompt (each with its `weights_version`); `train(trainer_version, groups)` runs one
    training step including the weight sync and returns `TrainResult`. `weights_version` / `trainer_version`
    are where the backend stands when the run starts (both 0 for a new run)."""

    gate: StalenessGate
    prompts_for_step: Callable[[int], Sequence[P]]
    generate: GenerateFn[P]
    train: TrainFn[P]
    weights_version: int = 0
    trainer_version: int = 0
    records: list[StepRecord] = field(default_factory=list)

    async def run(self, steps: int, *, first_step: int = 0) -> list[StepRecord]:
        if steps < 1:
            raise ValueError(f"steps={steps}: must be >= 1")
        version_changed = asyncio.Condition()
        produced: asyncio.Queue[_Produced[P] | BaseException] = asyncio.Queue()
        next_to_train = [first_step]  # the batch the trainer takes (or trains) next

        def may_start(step: int) -> bool:
            # the highest trainer version batch `step` can be trained at: one step per batch before it
            at_most = self.trainer_version + (step - next_to_train[0])
            return self.gate.may_start(at_most, self.weights_version)

        async def generator() -> None:
            try:
                for step in range(first_step, first_step + steps):
                    async with version_changed:
                        await version_changed.wait_for(lambda s=step: may_start(s))
                    start = time.perf_counter()
                    groups = await self.generate(self.prompts_for_step(step))
                    produced.put_nowait(_Produced(step, list(groups), (start, time.perf_counter())))
            except BaseException as error:  # the trainer re-raises it
                produced.put_nowait(error)
                raise

        task = asyncio.create_task(generator(), name="arctic-rl-async-generator")
        try:
            for _ in range(steps):
                item = await produced.get()
                if isinstance(item, BaseException):
                    raise item
                record = await self._train_batch(item)
                self.records.append(record)
                next_to_train[0] = item.step + 1
                async with version_changed:
                    version_changed.notify_all()
        finally:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return self.records

    async def _train_batch(self, item: _Produced[P]) -> StepRecord:
        trainer_version = self.trainer_version
        decision = self.gate.admit([g.weights_version for g in item.groups], trainer_version)
        groups = [item.groups[i] for i in decision.kept]
        dropped = regenerated = 0
        if decision.stale and self.gate.policy == "regenerate":
            fresh = await self.generate([item.groups[i].prompt for i in decision.stale])
            groups += list(fresh)
            regenerated = len(fresh)
        else:
            dropped = len(decision.stale)
        versions = [g.weights_version for g in groups]
        self.gate.assert_within(versions, trainer_version)  # nothing older than k is ever trained
        lags = [trainer_version - v for v in versions]
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        is_stats = None
        if groups:
            result = await self.train(trainer_version, groups)
            metrics, is_stats = dict(result.metrics), result.is_stats
            self.weights_version = result.weights_version
            self.trainer_version = trainer_version + 1
        metrics.update(
            step_metrics(
                max_staleness=self.gate.max_staleness,
                trained_staleness=lags,
                dropped_groups=dropped,
                regenerated_groups=regenerated,
                is_stats=is_stats,
            )
        )
        return StepRecord(
            step=item.step,
            trainer_version=trainer_version,
            group_versions=tuple(versions),
            metrics=metrics,
            generation_interval=item.interval,
            training_interval=(start, time.perf_counter()),
            trained=bool(groups),
        )

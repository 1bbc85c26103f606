"""SkyRL 0.4.0's fully asynchronous trainer (`FullyAsyncRayPPOTrainer`, `trainer.fully_async.enabled`)
on a core backend, with the core's bounded staleness (`async.max_staleness`, `async.stale_policy`).

SkyRL runs `num_parallel_generation_workers` generation tasks next to its training loop; its
staleness manager bounds how many groups may be ahead of training (a capacity rule: a group
scheduled at step i is trained at step j <= i + max_staleness_steps in steady state, and only
warned about when it is not). Here every group carries the weights version its generate call
sampled with (`ArcticGenerator`, `WEIGHTS_VERSION_KEY`), and before a mini-batch is trained each
group is checked against the trainer's version (its optimizer steps so far): one older than
`async.max_staleness` is never trained: it is dropped (its prompt marked filtered, as SkyRL's own
`sample_full_batch` drops a group) or generated again with the current weights, by
`async.stale_policy`. Versions, staleness and drops/regenerations are in the step's metrics and
in the payload trace.

Weight sync stays SkyRL's: after each training step `save_weights_for_sampler` (the core
weight-sync policy). Generation already in flight is not stopped: what it reports is the version
it was sent with (the backend's record at request time), so its staleness is never under-counted.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from arctic_rl_core.async_grpo.metrics import step_metrics
from arctic_rl_core.async_grpo.staleness import StalenessGate
from loguru import logger
from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer, GeneratedOutputGroup

from adapter_skyrl.generator import GENERATOR_RATES, WEIGHTS_VERSION_KEY, combine_call_metrics
from adapter_skyrl.skyrl_internals import generation_exhausted
from adapter_skyrl.trainer import ArcticPPOTrainer

if TYPE_CHECKING:
    from arctic_rl_core.config.schema import AsyncSettings

EXHAUSTION_POLL_S = 0.5  # how often a wait for a replacement group checks that the epoch ran dry
# The core's version staleness, logged next to SkyRL's own `async/staleness_*` (steps since a group
# was scheduled), which keep SkyRL's meaning.
VERSION_STALENESS_NAMES = {
    "async/staleness_mean": "async/weights_staleness_mean",
    "async/staleness_max": "async/weights_staleness_max",
    "async/staleness_min": "async/weights_staleness_min",
}


class ArcticFullyAsyncPPOTrainer(ArcticPPOTrainer, FullyAsyncRayPPOTrainer):
    """SkyRL's `FullyAsyncRayPPOTrainer` whose models live on a core backend, with every trained
    group's weights version checked against `async.max_staleness`."""

    def __init__(self, *args: Any, staleness: AsyncSettings, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gate = StalenessGate(int(staleness.max_staleness), staleness.stale_policy)
        # (global step, trainer version, [weights version of each trained group]) per step
        self.trained_versions: list[tuple[int, int, list[int]]] = []
        self.trained_uids: list[list[str]] = []  # the prompt uid of each trained group, per step
        self._step_gate: tuple[list[int], int, int] | None = None  # staleness, dropped, regenerated

    # -- the staleness gate -----------------------------------------------------------------------
    def trainer_version(self) -> int:
        """Optimizer steps taken before the one about to be trained (the sampler's version after a sync)."""
        return int(self.dispatch.optimizer_steps)

    @staticmethod
    def group_version(group: GeneratedOutputGroup) -> int:
        versions = group.generator_output.get(WEIGHTS_VERSION_KEY)
        if not versions:
            raise RuntimeError(
                f"generated group {group.uid} carries no weights version: the fully async Arctic trainer "
                "needs the ArcticGenerator (or a subclass)"
            )
        return min(int(v) for v in versions)  # one generate call: every row has the same version

    def staleness(self, group: GeneratedOutputGroup, trainer_version: int) -> int:
        """s - v (a version ahead of the trainer is the core's `StaleRolloutError`)."""
        return self.gate.staleness(self.group_version(group), trainer_version)

    async def _collect_generation_mini_batch(
        self, generation_output_group_buffer: asyncio.Queue, all_generators_done: asyncio.Event
    ) -> tuple[list[GeneratedOutputGroup], list[GeneratedOutputGroup], bool]:
        """SkyRL's collection, then the core's gate: a group older than `async.max_staleness` is
        dropped (and replaced by the next one to finish) or regenerated, by `async.stale_policy`."""
        kept, dropped, exhausted = await super()._collect_generation_mini_batch(
            generation_output_group_buffer, all_generators_done
        )
        k = self.gate.max_staleness
        dropped_stale = regenerated = 0
        trainer_version = self.trainer_version()
        admitted: list[GeneratedOutputGroup] = []
        pending = list(kept)
        while pending and not exhausted:
            group = pending.pop(0)
            lag = self.staleness(group, trainer_version)
            if lag <= k:
                admitted.append(group)
                continue
            logger.warning(
                f"group {group.uid}: weights version {self.group_version(group)} is {lag} steps behind the "
                f"trainer's {trainer_version} (async.max_staleness={k}): {self.gate.policy}"
            )
            if self.gate.policy == "regenerate":
                admitted.append(await self._regenerate(group))
                regenerated += 1
                continue
            dropped_stale += 1
            getattr(self.generator, "inputs_by_uid", {}).pop(group.uid, None)
            await self._staleness_manager.on_rollout_filtered()
            await self.async_train_dataloader.mark_filtered_uids([group.uid])
            replacement = await self._next_group(generation_output_group_buffer, all_generators_done)
            if replacement is None:
                exhausted = True
                admitted.extend(pending)
                break
            pending.append(replacement)
        if not exhausted:
            versions = [self.group_version(g) for g in admitted]
            self.gate.assert_within(versions, trainer_version)  # the last check before training
            self.trained_versions.append((self.global_step, trainer_version, versions))
            self.trained_uids.append([g.uid for g in admitted])
            self._step_gate = ([trainer_version - v for v in versions], dropped_stale, regenerated)
            self.all_metrics["async/trainer_version"] = float(trainer_version)
            trace = getattr(self.dispatch, "trace", None)
            if trace is not None:
                trace.record_event(
                    "train_rollout_versions",
                    step=self.global_step,
                    trainer_version=trainer_version,
                    versions=versions,
                    dropped=dropped_stale,
                    regenerated=regenerated,
                )
        return admitted, dropped, exhausted

    def train_critic_and_policy(self, data: Any) -> dict[str, float]:
        """SkyRL's training step, then the core's `async/*` statistics of the step (staleness of the
        trained groups, drops and regenerations, the IS weights sent)."""
        status = super().train_critic_and_policy(data)
        if self._step_gate is not None:
            lags, dropped_stale, regenerated = self._step_gate
            metrics = step_metrics(
                max_staleness=self.gate.max_staleness,
                trained_staleness=lags,
                dropped_groups=dropped_stale,
                regenerated_groups=regenerated,
                is_stats=self.dispatch.pop_is_weight_stats(),
            )
            self.all_metrics.update({VERSION_STALENESS_NAMES.get(k, k): v for k, v in metrics.items()})
            self._step_gate = None
        return status

    async def _regenerate(self, group: GeneratedOutputGroup) -> GeneratedOutputGroup:
        """The group's prompts generated again, with the weights the sampler serves now."""
        inputs = getattr(self.generator, "inputs_by_uid", {})
        if group.uid not in inputs:
            raise RuntimeError(
                f"group {group.uid} is too stale and its generator input was not kept: "
                "async.stale_policy=regenerate needs the ArcticGenerator with remember_inputs=True"
            )
        output = await self.generator.generate(inputs[group.uid])
        return GeneratedOutputGroup(
            generator_output=output,
            uid=group.uid,
            global_step_when_scheduled=self.global_step,
            group_completion_time_s=group.group_completion_time_s,
            prompts=group.prompts,
        )

    async def _next_group(
        self, buffer: asyncio.Queue, all_generators_done: asyncio.Event
    ) -> GeneratedOutputGroup | None:
        """The next group to finish, or None when the epoch has no more to give (every prompt drawn,
        none in flight, the buffer empty)."""
        if self.sample_full_batch:  # SkyRL then watches its generation tasks itself
            return await self._drain_next_group(buffer, all_generators_done)
        while True:
            try:
                return await asyncio.wait_for(buffer.get(), EXHAUSTION_POLL_S)
            except TimeoutError:
                if buffer.empty() and generation_exhausted(self):
                    return None

    def convert_generation_group_mini_batch_to_training_input(self, groups, dropped_groups=None):
        """SkyRL's conversion; the inputs kept for regeneration are released once their group trains,
        and the generator's per-call metrics are re-aggregated over the trained groups
        (`trained_generate_metrics`)."""
        inputs = getattr(self.generator, "inputs_by_uid", None)
        if inputs is not None:
            for group in groups:
                inputs.pop(group.uid, None)
            for group in dropped_groups or ():
                inputs.pop(group.uid, None)
        result = super().convert_generation_group_mini_batch_to_training_input(groups, dropped_groups)
        self.all_metrics.update(self.trained_generate_metrics(groups))
        return result

    def trained_generate_metrics(self, groups: list[GeneratedOutputGroup]) -> dict[str, float]:
        """The ArcticGenerator's per-call metrics over the step's trained groups. SkyRL's
        concatenation of group outputs averages only keys named avg/mean, takes min/max by name and
        sums the rest, so a step of several groups would log the sum of their weights versions and
        of their rates. Here `generate/weights_version` is the OLDEST weights version a trained group
        was sampled with (the synchronous trainer's one version per step, and the trainer version less
        `async/weights_staleness_max`), `generate/weights_version_max` the newest, and each rate the
        mean over the trained rollouts."""
        if not groups:
            return {}
        versions = [self.group_version(g) for g in groups]
        out = {
            "generate/weights_version": float(min(versions)),
            "generate/weights_version_max": float(max(versions)),
        }
        combined = combine_call_metrics(
            [
                (len(g.generator_output["response_ids"]), g.generator_output.get("rollout_metrics") or {})
                for g in groups
            ]
        )
        out.update({name: combined[name] for name in GENERATOR_RATES if name in combined})
        return out

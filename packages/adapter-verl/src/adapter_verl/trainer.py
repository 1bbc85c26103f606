"""The adapter's V1 trainer modes: verl's own PPO trainers with CPU forwarder workers.

- `arctic` (`trainer.v1.trainer_mode=arctic`, the adapter's default): verl's synchronous trainer. It
  keeps verl's sync semantics on purpose: verl switches on async behaviour (async replay buffer,
  generation batch size 1, TransferQueue checkpointing) wherever the mode name is not "sync", so
  this trainer reports "sync" as its mode.
- `arctic_separate_async` (what the adapter makes of verl's `trainer.v1.trainer_mode=separate_async`):
  verl's separate-async trainer (its replay buffer, prefetch window and staleness control; rollout
  on the standalone sampling GPUs only, `actor_rollout_ref.hybrid_engine=false`). It reports
  "separate_async" so that every one of verl's mode checks takes its asynchronous branch and reads
  `trainer.v1.separate_async`. Weights reach the sampler through the core weight sync at every step
  boundary; generation already in flight is not aborted (the arctic replica serves requests whole).
  Before each update the trainer hands every row's sampling version to the worker, which checks it
  against `async.max_staleness` and adds the truncated IS weights (`adapter_verl.worker`).

Both train a step's rows in dataloader order (`adapter_verl.batch_order`: verl's replay buffer hands
them over in the order their generations completed), unless a custom replay buffer
(`trainer.v1.sampler.custom_sampler`) chooses the order itself.

Their actor/rollout/ref workers are CPU Ray actors (`adapter_verl.worker`) that forward to the core
backend; GPUs belong to the backend, not to verl.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import ray
from arctic_rl_core.checkpoint_manifest import (
    CheckpointFolder,
    step_save,
    verify,
    write_manifest,
)
from arctic_rl_core.generate_batcher import SamplerQueueStats
from arctic_rl_core.run_lock import RunFolderLock
from omegaconf import OmegaConf, open_dict
from verl.single_controller.ray import RayResourcePool, ResourcePoolManager
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from adapter_verl.backend_factory import shutdown_started_backends
from adapter_verl.batch_order import DataloaderOrder, restore_dataloader_order
from adapter_verl.config import settings_from_verl
from adapter_verl.model_overrides import DerivedModel
from adapter_verl.modes import ASYNC_TRAINER_MODE, TRAINER_MODE, VERL_SEPARATE_ASYNC, VERL_SYNC
from adapter_verl.session import start_session
from adapter_verl.verl_internals import (
    ROLLOUT_VERSIONS_KEY,
    add_step_metrics,
    checkpoint_engine_backend,
    rollout_servers,
    set_checkpoint_engine_backend,
    tolerate_flush_in_separate_async_log,
)
from adapter_verl.worker import ArcticActorRolloutRefWorker

logger = logging.getLogger(__name__)

tolerate_flush_in_separate_async_log()

VERL_LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's record of its latest checkpoint
# verl's checkpoint engine that calls only `actor_wg.update_weights` (the forwarder's core weight sync)
NAIVE_CHECKPOINT_ENGINE = "naive"


@dataclass
class CpuResourcePoolManager(ResourcePoolManager):
    """verl's resource pools on CPU: one CPU bundle per forwarder worker (no GPU is requested;
    the stock manager hardcodes `use_gpu=True` and checks GPU counts)."""

    max_colocate_count: int = 1

    def create_resource_pool(self) -> None:
        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=False,
                max_colocate_count=self.max_colocate_count,
                name_prefix=name,
            )
        self._check_resource_available()

    def _check_resource_available(self) -> None:
        available_cpus = ray.available_resources().get("CPU", 0)
        required = self.get_n_gpus() * self.max_colocate_count
        if available_cpus < required:
            raise ValueError(
                f"the Arctic forwarder worker needs {required} Ray CPU(s) but the Ray cluster has "
                f"{available_cpus} free: raise ray_kwargs.ray_init.num_cpus (logical CPUs are fine)"
            )


# verl fields that size verl's own worker groups and rollout replicas. On the Arctic path they are
# the Arctic jobs' GPUs (mapped into the core placement before this runs); verl itself runs one
# CPU forwarder worker and one rollout replica that forward to the backend.
FORWARDER_TOPOLOGY: dict[str, int] = {
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 1,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.data_parallel_size": 1,
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": 1,
}


# separate async: verl sizes its standalone rollout pool (one replica per rollout.nnodes x
# rollout.n_gpus_per_node / TP) from these; on the Arctic path they are the sampling job's GPUs.
STANDALONE_ROLLOUT_TOPOLOGY: dict[str, int] = {
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": 1,
}


def custom_replay_buffer(config) -> bool:
    """Whether `trainer.v1.sampler.custom_sampler` names a replay buffer class (path and name), as
    verl's `_build_replay_buffer` decides it."""

    custom = OmegaConf.select(config, "trainer.v1.sampler.custom_sampler")
    return bool(custom is not None and custom.get("path") and custom.get("name"))


def forwarder_topology(config, extra: dict[str, int] | None = None) -> dict[str, tuple[object, int]]:
    """Rewrite verl's placement fields in `config` to the forwarder topology (after the core
    config has read them), plus `extra`; returns what changed, field -> (was, now), and logs it."""

    changed: dict[str, tuple[object, int]] = {}
    with open_dict(config):
        for path, value in {**FORWARDER_TOPOLOGY, **(extra or {})}.items():
            was = OmegaConf.select(config, path)
            if was != value:
                OmegaConf.update(config, path, value, merge=False)
                changed[path] = (was, value)
    if changed:
        logger.info(
            "adapter_verl: verl runs one CPU forwarder and one rollout replica; the GPUs belong to the "
            "Arctic jobs (%s)",
            ", ".join(f"{path} {was} -> {now}" for path, (was, now) in changed.items()),
        )
    return changed


class _ArcticForwarding:
    """What both Arctic trainer modes add to verl's trainer: settings, backend and session before any
    worker exists, the forwarder workers on CPU pools, the sync's metrics per step, shutdown."""

    # verl placement fields rewritten beyond FORWARDER_TOPOLOGY
    extra_topology: dict[str, int] = {}  # noqa: RUF012 (read-only class default)

    def fit(self, *args, **kwargs):
        """verl's training loop, then release the backend `_init_resource_pool_mgr` started: the
        Arctic server holds one job per type, so jobs left behind would refuse the next run's."""

        try:
            return super().fit(*args, **kwargs)
        finally:
            try:
                shutdown_started_backends()
            finally:
                lock = getattr(self, "run_lock", None)
                if lock is not None:
                    lock.release()

    # -- checkpoints: checked before any state is used (arctic_rl_core.checkpoint_manifest) -------
    def checkpoint_folder(self) -> CheckpointFolder:
        """verl's `trainer.default_local_dir` (relative to the working directory, as verl reads it)."""
        return CheckpointFolder(
            Path(os.path.abspath(self.config.trainer.default_local_dir)), VERL_LATEST_FILE
        )

    def _save_checkpoint(self) -> None:
        """verl's save, then the step folder's manifest: every file with its size and SHA-256."""
        step_folder = self.checkpoint_folder().step_folder(self.global_steps)
        # any failure (a full disk: torch.save's RuntimeError hides the errno) leaves no partial step
        # folder (the latest file names the last whole one) and one message naming it
        with step_save(self.checkpoint_folder(), step_folder):
            super()._save_checkpoint()
            write_manifest(step_folder)

    def _load_checkpoint(self) -> None:
        """Every file of the checkpoint checked before verl reads any: verl 0.9.1 starts from scratch
        without `latest_checkpointed_iteration.txt` and from the dataloader's start without a readable
        `data.pt`; here both stop with `CheckpointDamaged` naming the file."""
        mode = self.config.trainer.resume_mode
        if mode == "auto":
            self.checkpoint_folder().resume_point()
        elif mode == "resume_path":
            verify(os.path.abspath(self.config.trainer.resume_from_path))
        super()._load_checkpoint()

    def on_step_end(self) -> None:
        """verl's sync (weights to the sampler), then the sync's metrics into this step's logged
        metrics: `arctic/weights_version`, `arctic/rollout_weights_version`,
        `arctic/optimizer_steps`, `arctic/sync_time_s`, the update's `token_drift/turns` (worker.py); and
        the sampler's queue since the previous step's end (`sampler_queue/*`,
        `arctic_rl_core.generate_batcher`, over every replica)."""

        super().on_step_end()
        reported = {}
        for per_rank in self.actor_rollout_wg.sync_metrics():
            reported.update(per_rank or {})
        queues = ray.get([server.take_sampler_queue_stats.remote() for server in rollout_servers(self)])
        reported.update(SamplerQueueStats.combine(queues).metrics())
        add_step_metrics(self, reported)

    # the dataloader position of every prompt submitted for rollout (None: a custom replay buffer
    # orders the batch itself)
    dataloader_order: DataloaderOrder | None = None

    def _submit_batch_to_rollout(self, batch) -> int:
        """verl's submission of prompts for rollout (in dataloader order), their positions recorded."""
        if self.dataloader_order is not None:
            self.dataloader_order.submitted(batch["uid"])
        return super()._submit_batch_to_rollout(batch)

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        """The first step after verl's replay buffer sampled the batch (rows in completion order):
        restore dataloader order (`adapter_verl.batch_order`), then verl's balancing across data-parallel
        ranks (the one forwarder rank: it keeps the order), so the old-log-prob forward, the advantages and
        verl's mini-batch iterator in the actor update all see the same order in every run."""
        if self.dataloader_order is not None:
            restore_dataloader_order(batch, self.dataloader_order)
        return super()._balance_batch(
            batch, metrics, logging_prefix=logging_prefix, keep_minibatch=keep_minibatch
        )

    def _init_resource_pool_mgr(self) -> None:
        """Runs in `_setup` after the dataloader (so the step count is known) and before any
        worker: resolve the settings, start the backend, publish the session; then swap in the
        forwarder worker class and the CPU pool manager."""

        self.dataloader_order = None if custom_replay_buffer(self.config) else DataloaderOrder()
        self.arctic_settings = settings_from_verl(self.config, self.total_training_steps)
        # one writer per checkpoint folder, from before the backend starts (it may clean up jobs a
        # stopped run of this folder left on the server) to the end of `fit`
        self.run_lock = RunFolderLock(self.checkpoint_folder().root).acquire()
        if self.arctic_settings.derived_model is not None:  # model.override_config, for the Arctic jobs
            folder = DerivedModel(**self.arctic_settings.derived_model).make()
            logger.warning("adapter_verl: the Arctic jobs load %s (model.override_config applied)", folder)
        self.arctic_session = start_session(self.arctic_settings)
        forwarder_topology(self.config, self.extra_topology)
        super()._init_resource_pool_mgr()
        self.role_worker_mapping = {
            role: ray.remote(ArcticActorRolloutRefWorker) for role in self.role_worker_mapping
        }
        stock = self.resource_pool_manager
        self.resource_pool_manager = CpuResourcePoolManager(
            resource_pool_spec=stock.resource_pool_spec, mapping=stock.mapping
        )


@register_trainer(TRAINER_MODE)
class ArcticTrainer(_ArcticForwarding, PPOTrainerSync):
    """verl's sync PPO trainer whose workers forward to the Arctic (or reference) backend."""

    selected_mode: str = TRAINER_MODE

    @property  # type: ignore[override]
    def trainer_mode(self) -> str:
        """Always "sync": verl's mode checks must take their synchronous branches."""
        return VERL_SYNC

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        if value not in (TRAINER_MODE, VERL_SYNC):
            raise ValueError(
                f"trainer.v1.trainer_mode={value!r} reached ArcticTrainer: set trainer.v1.trainer_mode={TRAINER_MODE}"
            )
        self.selected_mode = value


@register_trainer(ASYNC_TRAINER_MODE)
class ArcticSeparateAsyncTrainer(_ArcticForwarding, PPOTrainerSeparateAsync):
    """verl's separate-async PPO trainer whose workers and standalone rollout replicas forward to
    the Arctic (or reference) backend."""

    selected_mode: str = ASYNC_TRAINER_MODE
    extra_topology = STANDALONE_ROLLOUT_TOPOLOGY

    def _init_resource_pool_mgr(self) -> None:
        """The settings are resolved (the checks see the user's engine), then: verl asserted a
        collective checkpoint engine for separate async (its NCCL/NIXL transfer to standalone replicas);
        on the Arctic path the backend moves the weights between its own jobs, so before `_setup` builds
        its checkpoint managers the engine becomes the one that calls the forwarder's weight sync."""
        super()._init_resource_pool_mgr()
        was = checkpoint_engine_backend(self.config)
        if was != NAIVE_CHECKPOINT_ENGINE:
            set_checkpoint_engine_backend(self.config, NAIVE_CHECKPOINT_ENGINE)
            logger.info(
                "adapter_verl: actor_rollout_ref.rollout.checkpoint_engine.backend %s -> %s: the Arctic "
                "backend syncs the weights between its own jobs (the forwarder's update_weights)",
                was,
                NAIVE_CHECKPOINT_ENGINE,
            )

    @property  # type: ignore[override]
    def trainer_mode(self) -> str:
        """Always "separate_async": verl's mode checks take their asynchronous branches and read
        `trainer.v1.separate_async`."""
        return VERL_SEPARATE_ASYNC

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        if value not in (ASYNC_TRAINER_MODE, VERL_SEPARATE_ASYNC):
            raise ValueError(
                f"trainer.v1.trainer_mode={value!r} reached ArcticSeparateAsyncTrainer: set "
                f"trainer.v1.trainer_mode={VERL_SEPARATE_ASYNC} (the adapter selects {ASYNC_TRAINER_MODE})"
            )
        self.selected_mode = value

    def _update_actor(self, batch, metrics: dict):
        """verl's actor update, with every row's sampling version (verl's `min_global_steps` tag: the
        oldest weights any of its tokens was drawn with) handed to the worker, which checks it against
        `async.max_staleness` before anything is trained."""
        batch.extra_info[ROLLOUT_VERSIONS_KEY] = [
            -1 if tag.get("is_padding", False) else int(tag["min_global_steps"]) for tag in batch.tags
        ]
        return super()._update_actor(batch, metrics)

"""The `arctic` V1 trainer mode: verl's synchronous PPO trainer with CPU forwarder workers.

Selected with `trainer.v1.trainer_mode=arctic`. It keeps verl's sync semantics on purpose: verl
switches on async behaviour (async replay buffer, generation batch size 1, TransferQueue
checkpointing) wherever the mode name is not "sync", so this trainer reports "sync" as its mode.
Its actor/rollout/ref workers are CPU Ray actors (`adapter_verl.worker`) that forward to the core
backend; GPUs belong to the backend, not to verl.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import ray
from verl.single_controller.ray import RayResourcePool, ResourcePoolManager
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from adapter_verl.plugin import TRAINER_MODE
from adapter_verl.verl_internals import add_step_metrics

logger = logging.getLogger(__name__)

SYNC_MODE = "sync"


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


def forwarder_topology(config) -> dict[str, tuple[object, int]]:
    """Rewrite verl's placement fields in `config` to the forwarder topology (after the core
    config has read them); returns what changed, field -> (was, now), and logs it."""
    from omegaconf import OmegaConf, open_dict

    changed: dict[str, tuple[object, int]] = {}
    with open_dict(config):
        for path, value in FORWARDER_TOPOLOGY.items():
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


@register_trainer(TRAINER_MODE)
class ArcticTrainer(PPOTrainerSync):
    """verl's sync PPO trainer whose workers forward to the Arctic (or reference) backend."""

    selected_mode: str = TRAINER_MODE

    @property  # type: ignore[override]
    def trainer_mode(self) -> str:
        """Always "sync": verl's mode checks must take their synchronous branches."""
        return SYNC_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        if value not in (TRAINER_MODE, SYNC_MODE):
            raise ValueError(
                f"trainer.v1.trainer_mode={value!r} reached ArcticTrainer: set trainer.v1.trainer_mode={TRAINER_MODE}"
            )
        self.selected_mode = value

    def fit(self, *args, **kwargs):
        """verl's training loop, then release the backend `_init_resource_pool_mgr` started: the
        Arctic server holds one job per type, so jobs left behind would refuse the next run's."""
        from adapter_verl.backend_factory import shutdown_started_backends

        try:
            return super().fit(*args, **kwargs)
        finally:
            shutdown_started_backends()

    def on_step_end(self) -> None:
        """verl's sync (weights to the sampler), then the sync's metrics into this step's logged
        metrics: `arctic/weights_version`, `arctic/rollout_weights_version`,
        `arctic/optimizer_steps`, `arctic/sync_time_s`."""
        super().on_step_end()
        reported = {}
        for per_rank in self.actor_rollout_wg.sync_metrics():
            reported.update(per_rank or {})
        add_step_metrics(self, reported)

    def _init_resource_pool_mgr(self) -> None:
        """Runs in `_setup` after the dataloader (so the step count is known) and before any
        worker: resolve the settings, start the backend, publish the session; then swap in the
        forwarder worker class and the CPU pool manager."""
        from adapter_verl.config import settings_from_verl
        from adapter_verl.session import start_session
        from adapter_verl.worker import ArcticActorRolloutRefWorker

        self.arctic_settings = settings_from_verl(self.config, self.total_training_steps)
        self.arctic_session = start_session(self.arctic_settings)
        forwarder_topology(self.config)
        super()._init_resource_pool_mgr()
        self.role_worker_mapping = {
            role: ray.remote(ArcticActorRolloutRefWorker) for role in self.role_worker_mapping
        }
        stock = self.resource_pool_manager
        self.resource_pool_manager = CpuResourcePoolManager(
            resource_pool_spec=stock.resource_pool_spec, mapping=stock.mapping
        )

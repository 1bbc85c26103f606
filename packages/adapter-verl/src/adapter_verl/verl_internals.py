"""Every verl 0.9.1 (and Ray 2.57) internal the verl adapter touches, in one place.

`INTERNALS` lists each private symbol, module path or dict key the adapter relies on, where it is
used and why no public API serves; `tests/verl/test_verl_internals.py` checks that each still
exists with the shape used (a new verl or Ray release fails there, with this list) and that the
adapter's other modules touch no private framework symbol that is not listed here. Reads and
writes of private state go through the functions below; overrides of private hooks stay methods of
the adapter's subclasses and are listed.

Replaced with public API: `ray._private.state.available_resources_per_node()` (the CPU check of the
forwarder pool) by `ray.available_resources()`.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterable
from typing import Any

from arctic_rl_core.framework_internals import Internal
from omegaconf import OmegaConf, open_dict

# verl modules whose import triggers a registration (plugin.py's import hook): verl registers V1
# trainer modes with a decorator in this package, and rollout replicas in this module.
TRAINER_PACKAGE = "verl.trainer.ppo.v1"
REPLICA_MODULE = "verl.workers.rollout.replica"
# The key of `TokenOutput.extra_fields` from which verl's LLM-server client reads the weights
# version a generation was sampled with (it derives `min_global_steps` / `max_global_steps`).
WEIGHTS_VERSION_KEY = "global_steps"
# The replay-buffer tag of a trajectory with the oldest weights version it was sampled with (verl's
# LLM-server client derives it from WEIGHTS_VERSION_KEY), and the key under which the async trainer
# hands the rows' versions to the worker with the update's other settings (`KVBatchMeta.extra_info`).
MIN_VERSION_TAG = "min_global_steps"
ROLLOUT_VERSIONS_KEY = "arctic_rollout_versions"
CHECKPOINT_ENGINE_BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"
SEPARATE_ASYNC_MODULE = "verl.trainer.ppo.v1.trainer_separate_async"
RAY_CONSTANTS_MODULE = "ray._private.ray_constants"
RAY_UV_HOOK_CONSTANT = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"

INTERNALS: tuple[Internal, ...] = (
    Internal(
        "verl.workers.rollout.replica:RolloutReplicaRegistry",
        "_registry",
        "class attribute",
        "plugin.register_replica_now (registered_rollout_loader)",
        "`register()` silently replaces an existing loader and `get()` instantiates it; only the dict "
        "tells whether another plugin already owns the rollout name",
    ),
    Internal(
        "verl.workers.rollout.replica:RolloutReplica",
        "_server_handle",
        "instance attribute",
        "replica.ArcticRolloutReplica.launch_servers (set_replica_server)",
        "the public `server_handle` property reads it and has no setter; verl's own replicas assign it "
        "in launch_servers",
    ),
    Internal(
        "verl.workers.rollout.replica:RolloutReplica",
        "_server_address",
        "instance attribute",
        "replica.ArcticRolloutReplica.launch_servers (set_replica_server)",
        "the public `server_address` property reads it and has no setter",
    ),
    Internal(
        "verl.workers.rollout.replica:TokenOutput",
        "extra_fields",
        "instance attribute",
        "rollout_server.ArcticRolloutServer.generate (WEIGHTS_VERSION_KEY, built in the receiving process)",
        "a public pydantic field, listed because the adapter's weights version travels in it under "
        "an untyped key (next entry)",
    ),
    Internal(
        "verl.workers.rollout.llm_server",
        WEIGHTS_VERSION_KEY,
        "key",
        "rollout_server.ArcticRolloutServer.generate",
        "verl's LLM-server client reads a generation's weights version from "
        "`extra_fields['global_steps']`; TokenOutput has no typed field for it",
    ),
    Internal(
        "verl.single_controller.base.worker:Worker",
        "_register_dispatch_collect_info",
        "call",
        "worker.ArcticActorRolloutRefWorker.init_model (collect_on_rank0)",
        "the only way to map every rank of a mesh to dp rank 0 (rank 0 alone talks to the backend); "
        "verl's own workers call it from init_model",
        ("self", "mesh_name", "dp_rank", "is_collect"),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_save_checkpoint",
        "override",
        "trainer._ArcticForwarding._save_checkpoint (the step folder's manifest)",
        "verl's save of a step's folder; verl offers no hook after it (its callbacks run after the "
        "sync), and the manifest must be written by the save it describes",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_load_checkpoint",
        "override",
        "trainer._ArcticForwarding._load_checkpoint (the checkpoint checked before it is read)",
        "verl's resume (it reads latest_checkpointed_iteration.txt and data.pt, starting from scratch "
        "when either is missing or damaged); no public hook runs before it",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_init_resource_pool_mgr",
        "override",
        "trainer.ArcticTrainer._init_resource_pool_mgr",
        "the one step of `_setup` after the dataloader (the step count is known) and before any "
        "resource pool or worker exists; verl offers no public hook there",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_setup",
        "call",
        "(verl calls it; the override above relies on its order)",
        "listed so that a reordered or renamed `_setup` fails here rather than mid-run",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_pending_sync_metrics",
        "instance attribute",
        "trainer.ArcticTrainer.on_step_end (add_step_metrics)",
        "`_consume_sync_metrics` merges it into the step's logged metrics (verl's async trainer "
        "stashes its sync stats there); a step's metrics have no public entry from on_step_end",
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_rollout_server_managers",
        "call",
        "trainer._ArcticForwarding.on_step_end (rollout_servers)",
        "the one list of every LLM-server manager a trainer owns (the separate-async trainer adds its "
        "standalone one); verl itself uses it for rollout profiling",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_consume_sync_metrics",
        "call",
        "(verl calls it; reads `_pending_sync_metrics`)",
        "the reader of the attribute above",
        ("self",),
    ),
    Internal(
        "verl.single_controller.ray.base:ResourcePoolManager",
        "_check_resource_available",
        "override",
        "trainer.CpuResourcePoolManager",
        "the stock check counts GPUs (the forwarder workers need CPUs) and `create_resource_pool` "
        "calls it; overriding it is the one way to replace the check",
        ("self",),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base",
        "register_trainer",
        "module attribute",
        "trainer.ArcticTrainer (decorator), plugin's import hook on TRAINER_PACKAGE",
        "V1 trainer modes register only through this decorator in verl.trainer.ppo.v1; verl loads "
        "plugins before it imports that package, so the plugin registers right after its import",
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_update_actor",
        "override",
        "trainer.ArcticSeparateAsyncTrainer._update_actor",
        "the one place of verl's step between the replay buffer's sample and the actor update where the "
        "rows' tags (their sampling versions) and the update's extra_info are both at hand",
        ("self", "batch", "metrics"),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_submit_batch_to_rollout",
        "override",
        "trainer._ArcticForwarding._submit_batch_to_rollout (batch_order.DataloaderOrder.submitted)",
        "every prompt verl hands to rollout passes here in dataloader order (the first batch, the async "
        "prefetch and the replay buffer's refills alike); no public hook sees the uids in that order",
        ("self", "batch"),
    ),
    Internal(
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "_balance_batch",
        "override",
        "trainer._ArcticForwarding._balance_batch (batch_order.restore_dataloader_order)",
        "the first call of `_step_once` after the replay buffer's sample (rows in completion order) and "
        "before the old-log-prob forward, the advantages and the actor update: the one place to restore "
        "dataloader order for all of them",
        ("self", "batch", "metrics", "logging_prefix", "keep_minibatch"),
    ),
    Internal(
        "verl.trainer.ppo.v1.agent_loop_tq",
        MIN_VERSION_TAG,
        "key",
        "trainer.ArcticSeparateAsyncTrainer._update_actor",
        "verl's agent loop tags each trajectory with the oldest weights version it was sampled with "
        "(for its own staleness metrics); no typed field carries it",
    ),
    Internal(
        SEPARATE_ASYNC_MODULE,
        "logger",
        "module attribute",
        "trainer (tolerate_flush_in_separate_async_log, at import)",
        "verl 0.9.1's PPOTrainerSeparateAsync._setup logs with `logger.info(..., flush=True)` when "
        "actor_rollout_ref.hybrid_engine=false, which `logging` rejects (TypeError: unexpected keyword "
        "'flush'): every separate-async run without the hybrid engine dies there. The adapter wraps the "
        "module's logger in an adapter that drops `flush`",
    ),
    Internal(
        RAY_CONSTANTS_MODULE,
        RAY_UV_HOOK_CONSTANT,
        "module attribute",
        "main.keep_ray_off_uv_run (turn_off_ray_uv_hook_constant)",
        "Ray reads RAY_ENABLE_UV_RUN_RUNTIME_ENV once, at import; when Ray is already imported only "
        "the module constant turns its uv-run hook off",
    ),
)


def registered_rollout_loader(name: str) -> Any:
    """The loader verl holds for rollout `name`, or None."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: PLC0415 - verl plugin: imported while verl imports

    return RolloutReplicaRegistry._registry.get(name)


def set_replica_server(replica: Any, handle: Any, address: str) -> None:
    """What verl's `RolloutReplica.server_handle` / `server_address` return."""
    replica._server_handle = handle
    replica._server_address = address


def collect_on_rank0(worker: Any, meshes: Iterable[str]) -> None:
    """Every rank of each mesh dispatches as dp rank 0; only rank 0 collects."""
    for mesh in meshes:
        worker._register_dispatch_collect_info(mesh_name=mesh, dp_rank=0, is_collect=worker.rank == 0)


def rollout_servers(trainer: Any) -> list[Any]:
    """The server actor handles of every rollout replica `trainer` owns."""
    return [
        server
        for manager in trainer._rollout_server_managers()
        for replica in manager.get_replicas()
        for server in replica.servers
    ]


def add_step_metrics(trainer: Any, metrics: dict[str, Any]) -> None:
    """Merge `metrics` into the current step's logged metrics (verl consumes them once)."""
    trainer._pending_sync_metrics = {**(getattr(trainer, "_pending_sync_metrics", None) or {}), **metrics}


def checkpoint_engine_backend(config: Any) -> Any:
    """verl's `actor_rollout_ref.rollout.checkpoint_engine.backend` in `config`."""

    return OmegaConf.select(config, CHECKPOINT_ENGINE_BACKEND)


def set_checkpoint_engine_backend(config: Any, backend: str) -> None:
    """Set verl's checkpoint-engine backend in `config` (read when `_setup` builds its managers)."""

    with open_dict(config):
        OmegaConf.update(config, CHECKPOINT_ENGINE_BACKEND, backend, merge=False)


class _LoggerWithoutFlush(logging.LoggerAdapter):
    """`logger.info(msg, flush=True)` (a print habit) for a `logging.Logger`: `flush` is dropped."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs.pop("flush", None)
        return msg, kwargs


def tolerate_flush_in_separate_async_log() -> None:
    """Let verl's separate-async module log its hybrid_engine=false line (see INTERNALS). Idempotent."""

    module = importlib.import_module(SEPARATE_ASYNC_MODULE)
    if not isinstance(module.logger, _LoggerWithoutFlush):
        module.logger = _LoggerWithoutFlush(module.logger, {})


def turn_off_ray_uv_hook_constant() -> None:
    """Ray already imported: its uv-run hook flag was read from the environment; set it off."""

    constants = sys.modules.get(RAY_CONSTANTS_MODULE)
    if constants is not None:
        setattr(constants, RAY_UV_HOOK_CONSTANT, False)

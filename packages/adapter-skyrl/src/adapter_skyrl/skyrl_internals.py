"""Every SkyRL 0.4.0 internal the SkyRL adapter touches, in one place.

`INTERNALS` lists each private symbol the adapter relies on, where it is used and why no public API
serves; `tests/skyrl/test_skyrl_internals.py` checks that each still exists with the shape used (a
new SkyRL release fails there, with this list) and that the adapter's other modules touch no
private SkyRL symbol that is not listed here. Writes of private state go through the functions
below; overrides of private hooks stay methods of the adapter's subclasses and are listed.

Replaced with public API: `WorkerDispatch._inference_engine_client` (assigned directly) by
`WorkerDispatch.set_inference_engine_client`.
"""

from __future__ import annotations

from typing import Any

from arctic_rl_core.framework_internals import Internal

WORKER_DISPATCH = "skyrl.backends.skyrl_train.workers.worker_dispatch:WorkerDispatch"
TRAINER = "skyrl.train.trainer:RayPPOTrainer"
EXPERIMENT = "skyrl.train.entrypoints.main_base:BasePPOExp"
FULLY_ASYNC_TRAINER = "skyrl.train.fully_async_trainer:FullyAsyncRayPPOTrainer"
GYM_GENERATOR = "skyrl.train.generators.skyrl_gym_generator:SkyRLGymGenerator"
ASYNC_DATALOADER = "skyrl.train.fully_async_trainer:_AsyncDataloader"
STALENESS_MANAGER = "skyrl.train.fully_async_trainer:_AsyncStalenessManager"
# BasePPOExp.__init__'s inference-server state, which the adapter's experiment (whose __init__
# does not run the base's: no trust_remote_code tokenizer, no colocation placement group) mirrors.
INFERENCE_SERVER_STATE = (
    "_server_groups",
    "_prefill_server_groups",
    "_decode_server_groups",
    "_inference_router",
)

INTERNALS: tuple[Internal, ...] = (
    Internal(
        WORKER_DISPATCH,
        "_actor_groups",
        "instance attribute",
        "dispatch.ArcticWorkerDispatch.__init__ (no_actor_groups)",
        "the base __init__ always files a 'policy' actor group (None here) and there is no public way "
        "to build a dispatch without actor groups; the Arctic dispatch has none",
    ),
    Internal(
        WORKER_DISPATCH,
        "_gpu_state",
        "instance attribute",
        "dispatch.ArcticWorkerDispatch.__init__ (no_actor_groups)",
        "the per-actor-group GPU residency table the base builds next to `_actor_groups`; emptied with it",
    ),
    Internal(
        TRAINER,
        "_execute_forward_pass",
        "override",
        "trainer.ArcticPPOTrainer._execute_forward_pass",
        "the one point where the forward batch is built and sent; the wire needs each row's response "
        "mask, which SkyRL's forward batch drops, and no public hook adds a field",
        ("self", "model", "data_fwd_pass", "key", "mini_batch_boundaries"),
    ),
    Internal(
        TRAINER,
        "_normalize_advantages",
        "override",
        "trainer.ArcticPPOTrainer._normalize_advantages",
        "SkyRL pre-scales advantages by its loss reduction here; the Arctic server reduces the loss "
        "itself, so the pre-scaling must be skipped and only batch normalisation kept",
        ("self", "data", "mini_batch_boundaries", "prompt_boundaries"),
    ),
    Internal(
        TRAINER,
        "_cleanup_old_checkpoints",
        "override",
        "trainer.ArcticPPOTrainer._cleanup_old_checkpoints",
        "the stock cleanup visits the SkyRL worker nodes, which the Arctic path does not have; the "
        "public `cleanup_old_checkpoints` helper does the driver-side part",
        ("self",),
    ),
    Internal(
        EXPERIMENT,
        "_setup_trainer",
        "override",
        "experiment.ArcticPPOExp._setup_trainer, demo_driver.DemoExp._setup_trainer",
        "`run()` builds the trainer through this method; the stock one imports the FSDP/Megatron "
        "workers and vLLM, which the Arctic path replaces; no public factory hook",
        ("self",),
    ),
    Internal(
        GYM_GENERATOR,
        "_run_in_executor_if_available",
        "override",
        "generator.ArcticGenerator._run_in_executor_if_available",
        "SkyRL's generator calls every environment method (init, step, close) through it; an exception "
        "there must be told apart from an engine or bookkeeping error so that one trajectory's broken "
        "environment costs its row, not the batch, and no public hook wraps the environment calls",
        ("self", "func", "args", "kwargs"),
    ),
    Internal(
        FULLY_ASYNC_TRAINER,
        "_collect_generation_mini_batch",
        "override",
        "fully_async.ArcticFullyAsyncPPOTrainer._collect_generation_mini_batch",
        "the one point where a step's generated groups are taken from the buffer before training; the "
        "core's staleness gate (async.max_staleness) must see each group there, and no public hook exists",
        ("self", "generation_output_group_buffer", "all_generators_done"),
    ),
    Internal(
        FULLY_ASYNC_TRAINER,
        "_drain_next_group",
        "call",
        "fully_async.ArcticFullyAsyncPPOTrainer._next_group",
        "SkyRL's own wait for the next finished group under sample_full_batch (it knows when its "
        "generation tasks are done); a dropped stale group is replaced through it",
        ("self", "buffer", "all_generators_done"),
    ),
    Internal(
        FULLY_ASYNC_TRAINER,
        "_staleness_manager",
        "instance attribute",
        "fully_async (on_rollout_filtered for a dropped group; generation_exhausted)",
        "SkyRL's capacity accounting: a dropped group must give its slot back exactly as SkyRL's own "
        "sample_full_batch drop does, or the generation workers deadlock",
    ),
    Internal(
        STALENESS_MANAGER,
        "_stat",
        "instance attribute",
        "skyrl_internals.generation_exhausted",
        "the count of groups still being generated; with every prompt drawn and none running, a "
        "dropped group cannot be replaced this epoch (no public query)",
    ),
    Internal(
        ASYNC_DATALOADER,
        "_exhausted",
        "instance attribute",
        "skyrl_internals.generation_exhausted",
        "set when the epoch's prompts are all drawn; no public query",
    ),
    *(
        Internal(
            EXPERIMENT,
            name,
            "instance attribute",
            "experiment.ArcticPPOExp.__init__ (no_inference_servers)",
            "set by BasePPOExp.__init__, which the adapter's experiment does not run (it builds no "
            "colocation placement group and no trust_remote_code tokenizer); SkyRL's code reads it",
        )
        for name in INFERENCE_SERVER_STATE
    ),
)


def no_actor_groups(dispatch: Any) -> None:
    """The dispatch serves everything from the backend: no actor group, no GPU state."""
    dispatch._actor_groups = {}
    dispatch._gpu_state = {}


def no_inference_servers(experiment: Any) -> None:
    """The state BasePPOExp.__init__ gives an experiment before inference servers exist."""
    for name in INFERENCE_SERVER_STATE:
        setattr(experiment, name, None)


def generation_exhausted(trainer: Any) -> bool:
    """SkyRL's fully async trainer has drawn every prompt of the epoch and none is being generated."""
    return bool(trainer.async_train_dataloader._exhausted) and trainer._staleness_manager._stat.running == 0

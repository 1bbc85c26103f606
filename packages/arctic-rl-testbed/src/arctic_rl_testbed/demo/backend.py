"""The demo's in-process reference backend: the tiny model from the demo's settings (or a saved
directory), non-colocated, and the weight sync that hands its trained weights to its sampler; and
the core backend settings of the GRPO phase (`grpo_backend_settings`), which both drivers pass to
their framework's config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from arctic_rl_core.config.reference_model import ReferenceModelConfig
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step

from arctic_rl_testbed.demo.options import server_address
from arctic_rl_testbed.reference.deepspeed_backend import create_reference_backend
from arctic_rl_testbed.reference.settings import OptimizerSettings, ReferenceEngineSettings

if TYPE_CHECKING:
    from arctic_rl_testbed.demo.options import DemoOptions
    from arctic_rl_testbed.reference.engine import ReferenceBackend


def reference_backend(options: DemoOptions, *, model_path: Path | None, lr: float) -> ReferenceBackend:
    """The warm start's engine. With the `deepspeed` trainer a step's rows are one micro-batch: 0.1.4's SFT
    pipeline never packs rows, and its `sft` loss is a token mean per micro-batch summed over the
    micro-batches, so a split would scale the gradient (4 rows of 5-40 tokens in 4 micro-batches: grad
    norm 10.8 against 1.9 in one, the same loss)."""

    model = ReferenceModelConfig(
        **options.model.model_dump(), model_path=None if model_path is None else str(model_path)
    )
    settings = ReferenceEngineSettings(
        model=model,
        seed=options.seed,
        optimizer=OptimizerSettings(lr=lr),
        colocated=False,
        num_threads=options.num_threads,
        trainer=options.trainer,
    )
    return create_reference_backend(settings)


async def synced(backend: ReferenceBackend) -> int:
    """Sync the trained weights to the sampler (the non-colocated policy); returns the version."""

    return await sync_after_step(backend, WeightSyncPolicy(colocated=False))


SERVER_CHECKPOINT_DIR = "server_checkpoints"
# the Snowflake database and schema of the Cortex path (/api/v2/databases/{db}/schemas/{schema}/...)
CORTEX_DATABASE, CORTEX_SCHEMA = "ARCTIC_RL", "DEMO"


def grpo_backend_settings(options: DemoOptions, *, model_path: Path) -> dict[str, Any]:
    """Core config settings (dotted keys) of the GRPO phase's backend. Default: the reference
    engine on the warm-started model. `options.server`: the Arctic on-prem HTTP API there
    (backend.kind=http), whose jobs load the warm-started model directory (so the server must see
    the run directory, as `arctic-rl serve --reference` on this machine does) and write the
    training job's files under the run directory; with `options.backend == "cortex"` the Cortex API
    there (backend.kind=cortex). `options.colocate`: placement.colocate."""

    settings: dict[str, Any] = {"placement.colocate": options.colocate}
    if options.server is None:
        settings |= {"backend.kind": "reference", "backend.reference.model_path": str(model_path.resolve())}
        return settings
    if options.backend == "cortex":
        # the Cortex API at the URL (token from ARCTIC_CORTEX_PAT, backend.cortex.token_env's default);
        # its jobs load the warm-started model directory and keep checkpoints in Cortex's own store
        settings |= {
            "backend.kind": "cortex",
            "backend.cortex.base_url": options.server.rstrip("/"),
            "backend.cortex.database": CORTEX_DATABASE,
            "backend.cortex.schema_name": CORTEX_SCHEMA,
        }
        return settings
    host, port = server_address(options.server)
    settings |= {
        "backend.kind": "http",
        "backend.host": host,
        "backend.port": port,
        "checkpoint.path": str((options.run_dir / SERVER_CHECKPOINT_DIR).resolve()),
        # the KL penalty's reference log-probs come from the server's log-prob job
        "placement.log_prob_gpus": 1 if options.kl_loss_coef > 0 else 0,
    }
    if options.trainer == "deepspeed":
        # the real worker on a CPU: no GPU kernels (the attention is each framework's own setting: its
        # driver sets sdpa); ZeRO-2, whose jobs DeepSpeed offloads with torch's AdamW (a colocated ZeRO-3
        # job sleeps only with DeepSpeed's FusedAdam, a C++ op); the log-prob job then runs ZeRO-0
        settings |= {"kernels.use_liger": False, "zorro.enable": False, "deepspeed.zero_stage": 2}
    return settings


def override_value(value: Any) -> str:
    """A setting as a command-line override value (booleans lower-case, as YAML/Hydra read them)."""
    return str(value).lower() if isinstance(value, bool) else str(value)

"""The demo's in-process reference backend: the tiny model from the demo's settings (or a saved
directory), non-colocated, and the weight sync that hands its trained weights to its sampler."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.backends.reference.engine import ReferenceBackend
    from arctic_rl_core.demo.options import DemoOptions


def reference_backend(options: DemoOptions, *, model_path: Path | None, lr: float) -> ReferenceBackend:
    from arctic_rl_core.backends.reference.engine import ReferenceBackend
    from arctic_rl_core.backends.reference.model_config import ReferenceModelConfig
    from arctic_rl_core.backends.reference.settings import OptimizerSettings, ReferenceEngineSettings

    model = ReferenceModelConfig(
        **options.model.model_dump(), model_path=None if model_path is None else str(model_path)
    )
    settings = ReferenceEngineSettings(
        model=model,
        seed=options.seed,
        optimizer=OptimizerSettings(lr=lr),
        colocated=False,
        num_threads=options.num_threads,
    )
    return ReferenceBackend(settings)


async def synced(backend: ReferenceBackend) -> int:
    """Sync the trained weights to the sampler (the non-colocated policy); returns the version."""
    from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step

    return await sync_after_step(backend, WeightSyncPolicy(colocated=False))

"""The CPU reference engine: the Arctic server's contract on one process, with a tiny model.

Public names are loaded on first use (this package imports no torch, transformers or Ray):
`ReferenceBackend`, `ReferenceEngineSettings`, `OptimizerSettings`, `ScheduleSettings`,
`ReferenceModelConfig`, `build_tokenizer`, `build_model`, `load_tokenizer`, `save_model_dir`,
`launch_reference_actor`, `RayReferenceHandle`, `ReferenceServer`, `REFERENCE_MODEL_NAME`,
`PayloadError`, `BackendStateError`, `create_reference_backend` and `DeepSpeedReferenceBackend` (the
`trainer="deepspeed"` engine: arctic-platform 0.1.4's own server code and DeepSpeedWorkers on CPU). The loss math is in `arctic_rl_testbed.reference.loss`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "ReferenceBackend": "engine",
    "ReferenceEngineSettings": "settings",
    "OptimizerSettings": "settings",
    "ScheduleSettings": "settings",
    "ReferenceModelConfig": "model_config",
    "build_tokenizer": "tokenizer",
    "build_model": "model",
    "load_tokenizer": "model",
    "save_model_dir": "model",
    "launch_reference_actor": "ray_actor",
    "RayReferenceHandle": "ray_actor",
    "ReferenceServer": "http_server",
    "REFERENCE_MODEL_NAME": "http_server",
    "PayloadError": "validation",
    "BackendStateError": "sleep_state",
    "DeepSpeedTrainerSettings": "settings",
    "create_reference_backend": "deepspeed_backend",
    "DeepSpeedReferenceBackend": "deepspeed_backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

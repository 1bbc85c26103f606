"""`backend.kind=reference` in the core's backend registry (`arctic_rl_core.backends.registry`, entry
point `arctic_rl.backends`): the engine for a run's config, in this process, or (`shared`) as a named
Ray actor that every process of the job reaches through `handle().connect()`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arctic_rl_testbed.reference.deepspeed_backend import create_reference_backend
from arctic_rl_testbed.reference.ray_actor import launch_reference_actor
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.config import ArcticRLConfig


def create_backend(cfg: ArcticRLConfig, *, shared: bool) -> Backend:
    """The reference engine `cfg` describes (`ReferenceEngineSettings.from_config`); `shared`: in a
    named Ray actor (needs `ray.init()` first)."""
    settings = ReferenceEngineSettings.from_config(cfg)
    if shared:
        return launch_reference_actor(settings)
    return create_reference_backend(settings)

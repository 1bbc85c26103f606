"""The run's wire `PayloadSpec`: the core's own mapping from the core config, so SkyRL and verl
send identical payloads for the same configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.wire import PayloadSpec


def payload_spec(cfg: ArcticRLConfig, *, pad_token_id: int) -> PayloadSpec:
    """One spec for every payload of the run (rows split across the server's data-parallel
    workers and gradient-accumulation steps as `cfg.shape` says)."""
    from arctic_rl_core.wire import PayloadSpec

    return PayloadSpec.from_config(cfg, pad_token_id=pad_token_id)

"""Whether arctic-platform 0.1.4 packs a training micro-batch's rows into one sequence that its attention
does not separate: a property of the run's config that the config's rules (`validation`) and the
payload spec (`arctic_rl_core.wire.spec`, which then sends rows unpacked) both read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arctic_rl_core.config.schema import ONPREM_BACKENDS

if TYPE_CHECKING:
    from arctic_rl_core.config.schema import ArcticRLSettings

FLASH_ATTENTIONS: tuple[str, ...] = ("flash_attention_2", "flash_attention_3")


def server_packs_rows_across_attention(cfg: ArcticRLSettings) -> bool:
    """True when arctic-platform 0.1.4 would pack a micro-batch's rows into one sequence that its
    attention does not separate: an on-prem server (ray/http), ZoRRo off (ZoRRo packs by itself, with
    flash attention), and an attention other than flash attention (whose varlen kernel splits the
    packed rows at the position-id resets; sdpa, eager and flex_attention are given an all-ones
    mask and attend across rows)."""
    return (
        cfg.backend.kind in ONPREM_BACKENDS
        and not cfg.zorro.enable
        and cfg.kernels.attn_implementation not in FLASH_ATTENTIONS
    )

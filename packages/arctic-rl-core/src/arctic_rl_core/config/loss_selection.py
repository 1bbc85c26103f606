"""Which server loss runs a framework's policy loss on a given backend (both adapters call this).

The built-in `verl_grpo` is kept where it computes the setting exactly, so nothing changes there:
the reference backend's dual clip (its `verl_grpo` honours clip ratios and aggregates per
sequence, as verl does) without token-sum. Where the server can import arctic-rl-core (the Ray
backend's locked environment, an HTTP server with the package) every family runs as
`arctic_rl_losses` (arctic-platform 0.1.4's built-in hard-codes the clip ratios and packs a
micro-batch into one sequence). Where it cannot (Cortex, an HTTP server without the package) the
built-in is the only choice, and validation rejects any family but dual_clip, saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def server_can_import_core(backend: Mapping[str, Any]) -> bool:
    """The same rule as `ArcticRLConfig.server_imports_core`, on the plain `backend` group."""
    kind = backend.get("kind", "reference")
    return kind in ("reference", "ray") or (
        kind == "http" and bool(backend.get("server_has_arctic_rl_core", True))
    )


def server_loss_for(
    policy_loss: str, backend: Mapping[str, Any], *, loss_agg_mode: str = "token-mean"
) -> str:
    """`loss.loss_fn` for the family `policy_loss` on the backend described by the `backend` group."""
    if not server_can_import_core(backend):
        return "verl_grpo"
    builtin_is_exact = backend.get("kind", "reference") == "reference" and loss_agg_mode != "token-sum"
    if policy_loss == "dual_clip" and builtin_is_exact:
        return "verl_grpo"
    return "arctic_rl_core"

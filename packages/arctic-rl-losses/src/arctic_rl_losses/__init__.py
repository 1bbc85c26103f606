"""Losses the Arctic server imports by dotted path: the GRPO-family policy losses SkyRL 0.4.0 and
verl 0.9.1 name, computed server-side exactly as each framework computes them.

- `names`: loss families, aggregation modes, KL types and the dotted paths (no torch; the config
  imports it).
- `server`: `policy_loss` and `import_probe`, the functions the server calls as
  `fn(model_outputs, batch, meta, config, device)`; rebuilds response rows from the server's packed
  micro-batch layout.
- `settings`: the settings read from `meta.actor_config` / `meta.policy_loss_config`.
- `families`: the per-token losses; `aggregation`: verl's `agg_loss` and `kl_penalty`;
  `policy`: the whole actor loss (policy - entropy bonus + KL) on rows.

Importing `arctic_rl_losses` itself loads only `names`; the rest needs torch only.
"""

from importlib.metadata import PackageNotFoundError, version

from arctic_rl_losses.names import (
    IMPORT_PROBE_FN,
    KL_LOSS_TYPES,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    SERVER_LOSS_FN,
)

try:
    __version__ = version("arctic-rl-losses")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = [
    "IMPORT_PROBE_FN",
    "KL_LOSS_TYPES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "SERVER_LOSS_FN",
    "__version__",
]

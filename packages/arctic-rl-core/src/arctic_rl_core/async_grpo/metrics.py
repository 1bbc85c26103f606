"""The per-step statistics of asynchronous GRPO (`async/*`), logged with each step's metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.is_weights import ISWeightStats

METRIC_NAMES: tuple[str, ...] = (
    "async/max_staleness",
    "async/staleness_mean",
    "async/staleness_max",
    "async/staleness_min",
    "async/trained_groups",
    "async/dropped_groups",
    "async/regenerated_groups",
    "async/is_weight_mean",
    "async/is_weight_max",
    "async/is_weight_min",
    "async/is_weight_clipped_fraction",
)


def step_metrics(
    *,
    max_staleness: int,
    trained_staleness: list[int],
    dropped_groups: int,
    regenerated_groups: int,
    is_stats: ISWeightStats | None,
) -> dict[str, float]:
    """One step's `async/*` values. `trained_staleness`: s - v of every trained group; `is_stats`:
    None when no IS weights were sent (k = 0), then the weights are 1 by definition."""
    lags = trained_staleness or [0]
    out = {
        "async/max_staleness": float(max_staleness),
        "async/staleness_mean": sum(lags) / len(lags),
        "async/staleness_max": float(max(lags)),
        "async/staleness_min": float(min(lags)),
        "async/trained_groups": float(len(trained_staleness)),
        "async/dropped_groups": float(dropped_groups),
        "async/regenerated_groups": float(regenerated_groups),
    }
    if is_stats is None:
        out.update(
            {
                "async/is_weight_mean": 1.0,
                "async/is_weight_max": 1.0,
                "async/is_weight_min": 1.0,
                "async/is_weight_clipped_fraction": 0.0,
            }
        )
    else:
        out.update(
            {
                "async/is_weight_mean": is_stats.mean,
                "async/is_weight_max": is_stats.max,
                "async/is_weight_min": is_stats.min,
                "async/is_weight_clipped_fraction": is_stats.clipped_fraction,
            }
        )
    return out

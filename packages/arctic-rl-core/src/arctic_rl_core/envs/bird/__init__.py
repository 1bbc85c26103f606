"""BIRD text-to-SQL: data loading, prompts, safe SQL execution, reward and evaluation.

Public entry points (imported on first use, so `import arctic_rl_core.envs.bird` stays cheap):
`compute_score`, `compute_score_batch`, `score_batch`, `ScoreRequest`, `BatchScores`,
`BirdScorer`, `GoldCache` (from `reward`), `SQLExecutor`, `ExecutorSettings` (from `executor`), and the
bundled sample in `arctic_rl_core.envs.bird.sample` (`sample_dir()`).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "compute_score": "reward",
    "compute_score_batch": "reward",
    "score_batch": "reward",
    "ScoreRequest": "reward",
    "BatchScores": "reward",
    "BirdScorer": "reward",
    "GoldCache": "reward",
    "Verdict": "reward",
    "SQLExecutor": "executor",
    "ExecutorSettings": "executor",
    "ExecutionResult": "executor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

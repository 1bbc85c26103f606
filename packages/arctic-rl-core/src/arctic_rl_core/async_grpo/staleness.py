"""The version arithmetic of bounded staleness and the gate in front of the trainer.

A rollout sampled with weights version v (the trainer step whose weights the sampler served) is
trained at trainer version s (optimizer steps taken before this step) with staleness s - v. The gate
admits a rollout group only if 0 <= s - v <= k; every other group is stale (older than k) or impossible
(a version ahead of the trainer: a bookkeeping bug, raised at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig

StalePolicy = Literal["drop", "regenerate"]


class StaleRolloutError(RuntimeError):
    """A rollout older than `async.max_staleness` (or ahead of the trainer) was about to be trained."""


@dataclass(frozen=True)
class GateDecision:
    """Which rollout groups of a batch may be trained at `trainer_version`."""

    trainer_version: int
    kept: tuple[int, ...]  # indices of groups within the bound
    stale: tuple[int, ...]  # indices of groups older than max_staleness
    staleness: tuple[int, ...]  # s - v of every group, in batch order


@dataclass(frozen=True)
class StalenessGate:
    """`max_staleness` k and what to do with a group older than k (`drop` or `regenerate`)."""

    max_staleness: int
    policy: StalePolicy = "drop"

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness={self.max_staleness}: must be >= 0 (async.max_staleness)")
        if self.policy not in ("drop", "regenerate"):
            raise ValueError(f"policy={self.policy!r}: expected 'drop' or 'regenerate' (async.stale_policy)")

    @classmethod
    def from_config(cls, cfg: ArcticRLConfig) -> StalenessGate:
        settings = cfg.async_settings
        return cls(settings.max_staleness, settings.stale_policy)

    def staleness(self, version: int, trainer_version: int) -> int:
        """s - v; a version ahead of the trainer is a `StaleRolloutError` (it cannot have been sampled)."""
        if version > trainer_version:
            raise StaleRolloutError(
                f"rollout weights version {version} is ahead of the trainer version {trainer_version}: "
                "the version must be GenerateOutput.weights_version of the call that sampled it"
            )
        return trainer_version - version

    def may_start(self, batch_step: int, weights_version: int) -> bool:
        """Whether generation for the batch trained at trainer version `batch_step` may start with the
        sampler serving `weights_version` (the admission rule of an overlapped loop)."""
        return batch_step - weights_version <= self.max_staleness

    def admit(self, versions: Sequence[int], trainer_version: int) -> GateDecision:
        """Split groups (one weights version each) into kept and stale at `trainer_version`."""
        staleness = tuple(self.staleness(int(v), trainer_version) for v in versions)
        kept = tuple(i for i, lag in enumerate(staleness) if lag <= self.max_staleness)
        stale = tuple(i for i, lag in enumerate(staleness) if lag > self.max_staleness)
        return GateDecision(trainer_version=trainer_version, kept=kept, stale=stale, staleness=staleness)

    def assert_within(self, versions: Sequence[int], trainer_version: int) -> None:
        """Raise `StaleRolloutError` naming the first group older than k (the last check before training)."""
        decision = self.admit(versions, trainer_version)
        if decision.stale:
            index = decision.stale[0]
            raise StaleRolloutError(
                f"rollout group {index} was sampled with weights version {versions[index]} and would be trained "
                f"at trainer version {trainer_version}: staleness {decision.staleness[index]} > "
                f"async.max_staleness={self.max_staleness}; drop or regenerate it first (StalenessGate.admit)"
            )

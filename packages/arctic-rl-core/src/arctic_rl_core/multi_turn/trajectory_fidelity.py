"""Which turns of a token-in / token-out trajectory were sampled from exactly the ids it trains on.

A trajectory's row is its first prompt followed by what each turn appended (sampled tokens,
observation tokens). Turn k was sampled from `context_ids`; it is faithful to the row when that is
the row's prefix. The first prompt is never trained on, so where only it was tokenised differently
by the server (text prompts), the row's prompt becomes the server's ids (`prompt_ids`): an exact
repair. From the first turn whose context differs otherwise (`exact_turns`), the row holds ids the
sampler did not condition on: what those turns sampled must not be trained as if it had.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.multi_turn.turn_sampler import SampledTurn


@dataclass(frozen=True)
class TrajectoryFidelity:
    prompt_ids: tuple[int, ...]  # the row's prompt as the sampler saw it
    prompt_repaired: bool  # the server's tokenisation of the first prompt differs from the caller's
    exact_turns: int  # turns 0..exact_turns-1 were sampled from the row's own prefix
    turns: int

    @property
    def drifted(self) -> bool:
        return self.exact_turns < self.turns


def trajectory_fidelity(turns: Sequence[SampledTurn]) -> TrajectoryFidelity:
    """The fidelity of one trajectory's turns, in order (each turn's prompt extends the first's)."""
    if not turns:
        raise ValueError("a trajectory has at least one sampled turn")
    asked, seen = turns[0].prompt_ids, turns[0].context_ids
    exact = len(turns)
    for k, turn in enumerate(turns):
        if turn.prompt_ids[: len(asked)] != asked:
            raise ValueError(f"turn {k}'s prompt does not extend the trajectory's first prompt")
        if turn.context_ids != seen + turn.prompt_ids[len(asked) :]:
            exact = k
            break
    return TrajectoryFidelity(
        prompt_ids=seen, prompt_repaired=seen != asked, exact_turns=exact, turns=len(turns)
    )


DRIFTED_TURNS = "token_drift/turns"
REPAIRED_PROMPTS = "token_drift/prompts_repaired"


def drift_metrics(fidelities: Sequence[TrajectoryFidelity]) -> dict[str, float]:
    """Both adapters log these per generation: `token_drift/turns`, the share of turns sampled from other
    ids than their row holds (their tokens are not trained); `token_drift/prompts_repaired`, the share of
    trajectories whose first prompt the server tokenised differently (trained with the server's ids)."""
    if not fidelities:
        return {}
    turns = sum(f.turns for f in fidelities)
    return {
        DRIFTED_TURNS: sum(f.turns - f.exact_turns for f in fidelities) / max(1, turns),
        REPAIRED_PROMPTS: sum(f.prompt_repaired for f in fidelities) / len(fidelities),
    }

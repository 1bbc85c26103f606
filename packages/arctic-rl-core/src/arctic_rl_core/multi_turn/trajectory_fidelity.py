"""Which turns of a token-in / token-out trajectory were sampled from exactly the ids it trains on.

A trajectory's row is its first prompt followed by what each turn appended (sampled tokens,
observation tokens). Turn k was sampled from `context_ids`; it is faithful to the row when that is
the row's prefix. The first prompt is never trained on, so where only it was tokenised differently
by the server (text prompts), the row's prompt becomes the server's ids (`prompt_ids`): an exact
repair. From the first turn whose context differs otherwise (`exact_turns`), the row holds ids the
sampler did not condition on: what those turns sampled must not be trained as if it had.

`row_fidelity` states the same rule for a row a framework built itself from the turns (verl's agent
loops: the row's prompt ids, each turn's sampled ids at mask 1, the environment's ids between at mask 0)
where the sampled turns are not at hand: it recomputes, from the row alone, what a text-only sampler
read before each turn, and gives the row's mask with the turns not to train zeroed. Such a framework
keeps its own prompt ids, so nothing is repaired: a first prompt the server reads otherwise leaves the
whole row untrained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.multi_turn.prompt_text import PromptText
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


def turn_starts(response_mask: Sequence[int]) -> list[int]:
    """Where each run of mask-1 tokens (one sampled turn) begins in a row's response."""
    return [k for k, m in enumerate(response_mask) if m and (k == 0 or not response_mask[k - 1])]


def row_fidelity(
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    response_mask: Sequence[int],
    text: PromptText,
) -> tuple[TrajectoryFidelity, tuple[int, ...]]:
    """A framework-built row sampled turn by turn through a text-only server (`TurnSampler` over
    `PromptText`): its fidelity (a turn = a run of mask-1 tokens; exact while the row's ids before it
    are `text.server_ids(text.to_text(those ids))`, what the server read) and its mask with the first
    inexact turn's tokens and every later turn's zeroed."""
    if len(response_ids) != len(response_mask):
        raise ValueError(f"{len(response_ids)} response ids but {len(response_mask)} mask values")
    row = [int(t) for t in prompt_ids] + [int(t) for t in response_ids]
    starts = turn_starts(response_mask)
    exact = len(starts)
    for k, start in enumerate(starts):
        context = tuple(row[: len(prompt_ids) + start])
        if text.server_ids(text.to_text(context)) != context:
            exact = k
            break
    mask = [int(m) for m in response_mask]
    if exact < len(starts):
        mask[starts[exact] :] = [0] * (len(mask) - starts[exact])
    fidelity = TrajectoryFidelity(
        prompt_ids=tuple(row[: len(prompt_ids)]), prompt_repaired=False, exact_turns=exact, turns=len(starts)
    )
    return fidelity, tuple(mask)


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

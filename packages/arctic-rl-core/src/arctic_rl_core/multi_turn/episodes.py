"""Multi-turn episodes with any backend, outside a framework (the demo's accuracy, benchmarks).

Each episode starts from its prompt's token ids; a turn samples a response (`TurnSampler`: ids, or
text to the on-prem server), gives its text to the episode's environment (`step(text) -> EpisodeStep`,
e.g. `envs.bird.multi_turn.BirdSQLEpisode`) and, unless the episode ended, appends the response's ids
(without a final EOS: the conversation continues in one message) and the observation's ids to the
context: SkyRL's `use_conversation_multi_turn=false` layout, the one SkyRL-SQL trains with. The live
episodes go turn by turn together, one sampler call per turn (deterministic for a seeded sampler).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.multi_turn.turn_sampler import TurnSampler


class EpisodeEnv(Protocol):
    def step(self, action: str) -> Any: ...  # an object with .observation (str | None), .reward, .done


@dataclass
class EpisodeResult:
    """One finished episode: its reward (the last step's), turns taken, and the responses' texts.
    `turns` counts the actions the environment saw; `cut`: the environment had not ended it, its next
    context was longer than `max_input_length`."""

    reward: float = 0.0
    turns: int = 0
    responses: list[str] = field(default_factory=list)
    cut: bool = False


async def run_episodes(
    sampler: TurnSampler,
    prompts: Sequence[Sequence[int]],
    envs: Sequence[EpisodeEnv],
    params: SamplingParams,
    *,
    eos_token_id: int | None,
    max_input_length: int | None = None,
) -> list[EpisodeResult]:
    """Run every episode to its end: its environment says done, or (SkyRL's `max_input_length` rule)
    its next context would be longer than `max_input_length`; results in input order."""
    if len(prompts) != len(envs):
        raise ValueError(f"{len(prompts)} prompts for {len(envs)} environments: give one each")
    tokenizer = sampler.text.tokenizer
    contexts = [list(p) for p in prompts]
    results = [EpisodeResult() for _ in prompts]
    live = list(range(len(prompts)))
    while live:
        turns = await sampler.sample([contexts[i] for i in live], params)
        still = []
        for i, turn in zip(live, turns, strict=True):
            step = envs[i].step(turn.text)
            result = results[i]
            result.turns += 1
            result.responses.append(turn.text)
            result.reward = float(step.reward)
            if step.done:
                continue
            response = list(turn.token_ids)
            if response and response[-1] == eos_token_id:
                response = response[:-1]
            observation = tokenizer.encode(step.observation or "", add_special_tokens=False)
            contexts[i] += response + list(observation)
            if max_input_length is None or len(contexts[i]) <= max_input_length:
                still.append(i)
            else:
                result.cut = True
        live = still
    return results

"""Scripted BIRD multi-turn episodes (SkyRL-SQL's protocol, `arctic_rl_core.envs.bird.multi_turn`) for the
adapter's verl agent loop `bird_sql_agent` (test_verl_bird_agent_loop): four questions of the bundled BIRD
sample, each with the assistant turns the server serves (`arctic-rl serve --reference --fixed-rollouts`,
token ids of the tiny model's tokenizer) and what the episode must make of them, with `MAX_TURNS` turns:

- `query_then_answer`: runs a query, reads its result, answers with the gold SQL: two turns, reward 1;
- `answers_at_once`: answers in its first turn: one turn, reward 1;
- `hits_max_turns`: queries every turn; its third action ends the episode without an answer: reward -1;
- `sql_error_then_wrong`: its query fails (the error comes back as the observation, the episode goes on),
  then answers with a well-formed wrong query: two turns, reward 0.

A turn that ends with a stop string (`</sql>`) is served without EOS, as vLLM stops there; an answer
ends with EOS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_TURNS = 3


@dataclass(frozen=True)
class BirdScenario:
    name: str
    row_index: int  # of the bundled sample's train split, core preprocessing with MAX_TURNS
    turns: tuple[str, ...]  # the text of each assistant turn the server serves
    reward: float
    observed: tuple[str, ...] = ()  # a substring of each observation the episode answers with

    @property
    def assistant_turns(self) -> int:
        return len(self.turns)


_COUNT = "SELECT COUNT(*) FROM schools WHERE charter = 1"
BIRD_SCENARIOS = (
    BirdScenario(
        "query_then_answer",
        0,
        (
            f"<think>Count the charter schools.</think>\n<sql>{_COUNT}</sql>",
            f"<think>The count is in the result.</think>\n<solution>{_COUNT}</solution>",
        ),
        reward=1.0,
        observed=("You have 2 turns left",),
    ),
    BirdScenario(
        "answers_at_once",
        4,
        (
            "<think>Filter by county.</think>\n<solution>SELECT `District Name` FROM districts WHERE county = 'Marin'</solution>",
        ),
        reward=1.0,
    ),
    BirdScenario(
        "hits_max_turns",
        1,
        ("<think>Look at the schools.</think>\n<sql>SELECT `School Name` FROM schools LIMIT 1</sql>",)
        * MAX_TURNS,
        reward=-1.0,
        observed=("You have 2 turns left", "You have 1 turns left"),
    ),
    BirdScenario(
        "sql_error_then_wrong",
        3,
        (
            "<think>Try a table.</think>\n<sql>SELECT meals FROM nowhere</sql>",
            "<think>Give a number.</think>\n<solution>SELECT 0</solution>",
        ),
        reward=0.0,
        observed=("Error executing SQL: OperationalError: no such table: nowhere",),
    ),
)


def bird_rows() -> list[dict[str, Any]]:
    """The scenarios' rows, in scenario order: `arctic-rl bird preprocess --max-turns MAX_TURNS` rows of the
    bundled sample (compact schema)."""
    from bird_multi_turn_rows import bird_multi_turn_rows

    rows = bird_multi_turn_rows(MAX_TURNS)
    return [rows[s.row_index] for s in BIRD_SCENARIOS]


def bird_turn_ids(tokenizer: Any, text: str) -> list[int]:
    """An assistant turn as the model emits it: the text's tokens, EOS unless a stop string ended it."""
    from arctic_rl_core.envs.bird.multi_turn import STOP_STRINGS

    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids if text.endswith(STOP_STRINGS) else [*ids, int(tokenizer.eos_token_id)]


def bird_fixed_rollouts(tokenizer: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The `--fixed-rollouts` document: each question's turns, in order."""
    return {
        "format": "arctic-rl-fixed-rollouts/1",
        "prompts": [
            {
                "contains": row["extra_info"]["question"],
                "completions": [{"token_ids": bird_turn_ids(tokenizer, t)} for t in s.turns],
            }
            for s, row in zip(BIRD_SCENARIOS, rows, strict=True)
        ],
    }

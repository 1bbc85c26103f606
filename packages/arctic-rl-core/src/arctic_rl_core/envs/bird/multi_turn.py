"""BIRD multi-turn, SkyRL-SQL's protocol: the model may run SQL before it answers.

One episode per question, framework-neutral (`BirdSQLEpisode`; the SkyRL adapter registers it as the
skyrl-gym environment `bird_multi_turn`, verl wraps `step` as an agent-loop interaction):

- Each model turn is one action. `<sql>QUERY</sql>` runs QUERY against the question's database,
  read-only (the core executor: a `mode=ro` connection with a read-only authorizer, a time limit and
  a row / memory bound, in worker processes); the result (or the error) comes back as the observation
  `\\n\\n<observation>RESULT\\n<reminder>You have N turns left to complete the task.</reminder></observation>\\n\\n`,
  RESULT a table of at most `MAX_OBSERVATION_ROWS` rows when the whole one would exceed
  `MAX_OBSERVATION_CHARS` characters. An action with no `<sql>` block gets `INVALID_ACTION` as its result.
- The episode ends at the first action holding `<solution>...</solution>`, or after `max_turns`
  actions (SkyRL passes its `generator.max_turns`; `DEFAULT_MAX_TURNS` otherwise): the last action
  gets no observation. `ended_by` says which ("solution" or "max_turns").
- Reward, when the episode ends, on everything said (actions and observations, in order): -1.0 when it
  is not well formed (exactly one `<solution>`, closed, holding no `<think>`/`<sql>`/`<observation>`
  tag; at least one `<think>...</think>`; every observation followed by a `<think>`), else 1.0 when the
  solution's result set equals the gold SQL's (or an alternative answer's; set semantics, as BIRD's
  EX) and 0.0 otherwise. Intermediate actions get 0.0.

Those are SkyRL-SQL's tags, observation wrapper, turn limit and reward (skyrl-gym 0.4.0's `text2sql`
environment); the execution is the core's (`envs.bird.executor`, gold results cached per database),
and the result table is laid out as plain columns (SkyRL-SQL prints a pandas DataFrame).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arctic_rl_core.envs.bird.executor import SQLTask
from arctic_rl_core.envs.bird.reward import ScoreRequest, default_scorer

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SQL_OPEN, SQL_CLOSE = "<sql>", "</sql>"
SOLUTION_OPEN, SOLUTION_CLOSE = "<solution>", "</solution>"
OBSERVATION_OPEN, OBSERVATION_CLOSE = "<observation>", "</observation>"
STOP_STRINGS = (SQL_CLOSE, SOLUTION_CLOSE)  # what SkyRL-SQL's launchers stop generation at
DEFAULT_MAX_TURNS = 5
MAX_OBSERVATION_CHARS = 9000
MAX_OBSERVATION_ROWS = 50
INVALID_ACTION = "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, and try again."
CORRECT, WRONG, MALFORMED = 1.0, 0.0, -1.0
# SkyRL-SQL's data: extras `db_id` and `data` (the corpus), the databases under the env config's db_path
SKYRL_SQL_LAYOUT = {
    "bird": "bird/train/train_databases",
    "spider": "spider/database",
    "synsql": "SynSQL-2.5M/databases",
}

_SQL_BLOCK = re.compile(re.escape(SQL_OPEN) + r"(.*?)" + re.escape(SQL_CLOSE), re.DOTALL)
_THOUGHT = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)
_TAG_IN_SOLUTION = re.compile(r"</?(think|sql|observation)\b", re.IGNORECASE)


@dataclass(frozen=True)
class EpisodeStep:
    """What one action gives: the observation (None when the episode ended), the reward, whether it ended."""

    observation: str | None
    reward: float
    done: bool
    info: dict[str, Any]


def final_solution(transcript: str) -> str | None:
    """The SQL of a well-formed transcript's `<solution>`, or None (see the module doc's rules)."""
    if transcript.count(SOLUTION_OPEN) != 1:
        return None
    before, after = transcript.split(SOLUTION_OPEN, 1)
    if after.count(SOLUTION_CLOSE) != 1:
        return None
    solution = after.split(SOLUTION_CLOSE, 1)[0]
    if _TAG_IN_SOLUTION.search(solution) or not _THOUGHT.search(transcript):
        return None
    for match in re.finditer(re.escape(OBSERVATION_CLOSE), before, re.IGNORECASE):
        if not before[match.end() :].lstrip().lower().startswith(THINK_OPEN):
            return None
    return solution.strip()


def observation(body: str, turns_left: int) -> str:
    reminder = f"<reminder>You have {turns_left} turns left to complete the task.</reminder>"
    return f"\n\n{OBSERVATION_OPEN}{body}\n{reminder}{OBSERVATION_CLOSE}\n\n"


def render_rows(rows: Sequence[tuple[Any, ...]]) -> str:
    """A result table: a header of column numbers, then one line per row, columns right-aligned; cut
    to `MAX_OBSERVATION_ROWS` rows (and said so) when the whole table is longer than
    `MAX_OBSERVATION_CHARS` characters. Rows in a stable order (a result is a set)."""
    ordered = sorted(rows, key=repr)
    text = _table(ordered)
    if len(text) > MAX_OBSERVATION_CHARS:
        text = f"Truncated to {MAX_OBSERVATION_ROWS} lines since returned response too long: " + _table(
            ordered[:MAX_OBSERVATION_ROWS]
        )
    return text


def _table(rows: Sequence[tuple[Any, ...]]) -> str:
    if not rows:
        return "Empty result"
    columns = max(len(row) for row in rows)
    cells = [[str(i) for i in range(columns)]] + [
        [str(v) for v in row] + [""] * (columns - len(row)) for row in rows
    ]
    widths = [max(len(line[c]) for line in cells) for c in range(columns)]
    return "\n".join(
        " ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in cells
    )


def database_of(extras: Mapping[str, Any], env_config: Any = None) -> str:
    """The SQLite file of a row: the core's `extra_info.db_path`, or SkyRL-SQL's `db_id` + `data` under
    the environment config's `db_path` (`environment.skyrl_gym.<env>.db_path`)."""
    info = extras.get("extra_info")
    if isinstance(info, Mapping) and info.get("db_path"):
        return str(info["db_path"])
    db_id, corpus = extras.get("db_id"), extras.get("data")
    root = (
        env_config.get("db_path") if isinstance(env_config, Mapping) else getattr(env_config, "db_path", None)
    )
    if db_id and corpus in SKYRL_SQL_LAYOUT and root:
        return os.path.join(str(root), SKYRL_SQL_LAYOUT[str(corpus)], str(db_id), f"{db_id}.sqlite")
    raise ValueError(
        "BIRD multi-turn: the row names no database: give extra_info.db_path (arctic-rl bird preprocess writes "
        "it) or SkyRL-SQL's db_id and data (one of "
        f"{sorted(SKYRL_SQL_LAYOUT)}) with the environment's db_path; row keys: {sorted(extras)}"
    )


class BirdSQLEpisode:
    """One question's episode. `step(action)` per model turn until `done`; `metrics()` at the end."""

    def __init__(
        self,
        *,
        gold_sql: str,
        db_path: str,
        max_turns: int = DEFAULT_MAX_TURNS,
        alternative_answers: Sequence[str] = (),
        scorer: Any = None,
    ) -> None:
        if int(max_turns) < 1:
            raise ValueError(f"max_turns={max_turns}: an episode has at least one turn")
        if not isinstance(gold_sql, str) or not gold_sql.strip():
            raise ValueError(f"gold_sql={gold_sql!r}: the question's gold SQL is required")
        if not Path(db_path).is_file():
            raise FileNotFoundError(f"BIRD multi-turn: no database file at {db_path}")
        self.gold_sql = gold_sql
        self.db_path = db_path
        self.max_turns = int(max_turns)
        self.alternative_answers = tuple(str(sql) for sql in alternative_answers)
        self._scorer = scorer
        self.turns = 0
        self.sql_calls = 0
        self.transcript: list[str] = []
        self.verdict: dict[str, Any] | None = None
        self.ended_by: str | None = None  # "solution" or "max_turns" (no <solution> by the last turn)

    @classmethod
    def from_row(cls, extras: Mapping[str, Any], env_config: Any = None, **kwargs: Any) -> BirdSQLEpisode:
        """From a dataset row: the gold SQL in `reward_spec` / `reward_model.ground_truth`, the database by
        `database_of`, `max_turns` from the row (SkyRL's generator sets it) unless given."""
        gold = None
        for key in ("reward_spec", "reward_model"):
            spec = extras.get(key)
            if isinstance(spec, Mapping) and "ground_truth" in spec:
                gold = spec["ground_truth"]
                break
        if gold is None:
            raise ValueError(
                f"BIRD multi-turn: row keys {sorted(extras)} have no reward_spec.ground_truth or "
                "reward_model.ground_truth (the gold SQL)"
            )
        info = extras.get("extra_info") if isinstance(extras.get("extra_info"), Mapping) else {}
        kwargs.setdefault("max_turns", extras.get("max_turns") or info.get("max_turns") or DEFAULT_MAX_TURNS)
        kwargs.setdefault("alternative_answers", tuple(info.get("alternative_answers") or ()))
        return cls(gold_sql=str(gold), db_path=database_of(extras, env_config), **kwargs)

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            self._scorer = default_scorer()
        return self._scorer

    def step(self, action: str) -> EpisodeStep:
        if self.verdict is not None:
            raise RuntimeError("the episode has ended: start a new one")
        self.turns += 1
        self.transcript.append(action)
        answered = SOLUTION_OPEN in action and SOLUTION_CLOSE in action
        if answered or self.turns >= self.max_turns:
            self.ended_by = "solution" if answered else "max_turns"
            reward = self._final_reward()
            return EpisodeStep(None, reward, True, {"turns": self.turns})
        match = _SQL_BLOCK.search(action)
        body = INVALID_ACTION if match is None else self._run(match.group(1))
        text = observation(body, self.max_turns - self.turns)
        self.transcript.append(text)
        return EpisodeStep(
            text, 0.0, False, {"turns": self.turns, "sql": None if match is None else match.group(1)}
        )

    def metrics(self) -> dict[str, float]:
        """Per episode: turns taken, SQL queries run, whether the final answer was well formed and correct."""
        verdict = self.verdict or {}
        return {
            "turns": float(self.turns),
            "sql_calls": float(self.sql_calls),
            "well_formed": float(bool(verdict.get("well_formed"))),
            "correct": float(bool(verdict.get("correct"))),
        }

    def _run(self, sql: str) -> str:
        self.sql_calls += 1
        result = self.scorer.executor.run([SQLTask(self.db_path, sql)])[0]
        if result.ok:
            return render_rows(list(result.rows or ()))
        if result.error_kind == "timeout":
            return f"SQL Timeout:\n{sql}"
        return f"Error executing SQL: {result.error_message or result.error_kind}"

    def _final_reward(self) -> float:
        solution = final_solution("".join(self.transcript))
        if solution is None:
            self.verdict = {"well_formed": False, "correct": False, "scoring_error": ""}
            return MALFORMED
        request = ScoreRequest(
            solution_str=solution,
            gold_sql=self.gold_sql,
            db_path=self.db_path,
            alternative_answers=self.alternative_answers,
            sql=solution,
        )
        verdict = self.scorer.score([request]).verdicts[0]
        self.verdict = {
            "well_formed": True,
            "correct": verdict.correct,
            "scoring_error": verdict.scoring_error,
        }
        return CORRECT if verdict.correct else WRONG

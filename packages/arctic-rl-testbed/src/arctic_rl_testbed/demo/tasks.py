"""The demo's two tasks on their bundled samples: training rows for the RL framework, supervised
targets for the warm start, held-out prompts and their official scoring.

- `bird`: the bundled BIRD-format sample. GRPO trains on the `train` split; execution accuracy
  (EX, the official set semantics of `envs.bird.evaluate`) is measured on the `dev` split, whose
  database (`movie_club`) is not in the training split. Prompts are the core BIRD prompt with a
  compact schema (CREATE TABLE statements only) so that a CPU run stays short.
- `gsm8k`: the bundled GSM8K sample; the last `GSM8K_HELDOUT` problems are held out and scored by
  exact final answer (`envs.gsm8k.compute_score`).

BIRD multi-turn (`max_turns > 1`, SkyRL-SQL's protocol, `envs.bird.multi_turn`): the multi-turn prompt,
env class `bird_multi_turn`; the warm start teaches the format on two kinds of episodes, an answer at
once and (every other question) a first look at the table the gold query reads, then the answer after
the real observation; accuracy is the episodes' (`demo.evaluation.evaluate_episodes`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arctic_rl_core.envs.bird import preprocess as bird_preprocess
from arctic_rl_core.envs.bird.dataset import BirdQuestion, load_split
from arctic_rl_core.envs.bird.evaluate import Prediction, PredictionFile, evaluate
from arctic_rl_core.envs.bird.multi_turn import BirdSQLEpisode
from arctic_rl_core.envs.bird.preprocess import PreprocessOptions
from arctic_rl_core.envs.bird.sample import sample_dir
from arctic_rl_core.envs.bird.schema_prompt import SchemaPromptCache, SchemaPromptOptions
from arctic_rl_core.envs.bird.sql_extract import extract_sql, is_well_formatted
from arctic_rl_core.envs.gsm8k import build_rows as build_gsm8k_rows
from arctic_rl_core.envs.gsm8k import compute_score, sample_problems

from arctic_rl_testbed.demo.prompts import prompt_ids, response_ids

GSM8K_HELDOUT = 4
BIRD_TRAIN_SPLIT, BIRD_HELDOUT_SPLIT = "train", "dev"
_TABLE_REFERENCE = re.compile(r"\b(?:FROM|JOIN)\s+(`[^`]+`|\"[^\"]+\"|[A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


@dataclass(frozen=True)
class HeldoutScore:
    """Accuracy on the held-out split: `correct` of `total`, and per question what went wrong."""

    metric: str  # "EX" (BIRD execution accuracy) or "accuracy" (GSM8K exact answer)
    correct: int
    total: int
    errors: dict[str, int] = field(default_factory=dict)
    well_formatted: int = 0
    turns: dict[int, int] = field(default_factory=dict)  # multi-turn: episodes by turns taken
    # multi-turn: episodes by how they ended ("solution"; "max_turns": no <solution> by the last turn;
    # "context_limit": cut at max_input_length), and each episode (turns, ended, reward, responses)
    ended: dict[str, int] = field(default_factory=dict)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def percent(self) -> float:
        return 100.0 * self.correct / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "correct": self.correct,
            "total": self.total,
            "percent": self.percent,
            "well_formatted": self.well_formatted,
            "errors": dict(self.errors),
            **({"turns": {str(k): v for k, v in sorted(self.turns.items())}} if self.turns else {}),
            **({"ended": dict(self.ended)} if self.turns else {}),
            **({"episodes": list(self.episodes)} if self.episodes else {}),
        }


@dataclass(frozen=True)
class DemoTask:
    """Rows in the framework's dataset format (`prompt` chat messages, `env_class`,
    `reward_model.ground_truth`, `extra_info`), and supervised targets for the training rows."""

    name: str
    train_rows: list[dict[str, Any]]
    heldout_rows: list[dict[str, Any]]
    train_targets: list[str]  # reference answer of train_rows[i], in the format the reward asks for
    max_turns: int = 1  # > 1: BIRD multi-turn episodes

    def warm_start_pairs(self, tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
        """(prompt ids, answer ids) of the supervised warm start: each training row's reference answer;
        multi-turn BIRD also a first turn that looks at the data and, after its real observation, the
        answer (every other question)."""

        prompts = [prompt_ids(tokenizer, row["prompt"]) for row in self.train_rows]
        answers = [response_ids(tokenizer, text) for text in self.train_targets]
        for i in self._looking_rows():
            row = self.train_rows[i]
            look = bird_look(row["reward_model"]["ground_truth"])
            observation = _observation(row, look, self.max_turns)
            look_ids = tokenizer.encode(look, add_special_tokens=False)  # no EOS: the episode goes on
            prompts.append(prompts[i])
            answers.append(look_ids)
            prompts.append([*prompts[i], *look_ids, *tokenizer.encode(observation, add_special_tokens=False)])
            answers.append(answers[i])
        return prompts, answers

    def _looking_rows(self) -> range:
        """The training rows whose warm start also looks at the data first (multi-turn: every other one)."""
        return range(1, len(self.train_rows), 2) if self.max_turns > 1 else range(0)

    @property
    def warm_start_size(self) -> int:
        """How many (prompt, answer) pairs `warm_start_pairs` gives: a row, and two more per looking row."""
        return len(self.train_rows) + 2 * len(self._looking_rows())

    def steps_per_epoch(self, prompts_per_step: int) -> int:
        """GRPO steps per pass over the training rows (the last partial batch is dropped)."""
        steps = len(self.train_rows) // prompts_per_step
        if steps < 1:
            raise ValueError(
                f"prompts_per_step={prompts_per_step} exceeds the {len(self.train_rows)} training prompts"
            )
        return steps

    def score(self, rows: Sequence[dict[str, Any]], responses: Sequence[str]) -> HeldoutScore:
        """Accuracy of one response per row (BIRD: official EX; GSM8K: exact final answer)."""
        if len(responses) != len(rows):
            raise ValueError(f"{len(responses)} responses for {len(rows)} prompts: give one each")
        if self.name == "bird":
            return _bird_ex(rows, responses)
        return _gsm8k_accuracy(rows, responses)


def load_task(name: str, max_turns: int = 1) -> DemoTask:
    if name == "bird":
        return _bird_task(max_turns)
    if max_turns > 1:
        raise ValueError(f"task={name!r} with max_turns={max_turns}: the multi-turn task is BIRD")
    if name == "gsm8k":
        return _gsm8k_task()
    raise ValueError(f"task={name!r}: expected 'bird' or 'gsm8k'")


# -- BIRD -----------------------------------------------------------------------------------------


def _tables(sql: str) -> list[str]:
    tables: list[str] = []
    for match in _TABLE_REFERENCE.finditer(sql):
        name = match.group(1).strip('`"')
        if name not in tables:
            tables.append(name)
    return tables


def _plan(sql: str) -> str:
    tables = _tables(sql)
    return f"Read {', '.join(tables)}." if tables else "Compute it directly."


def bird_target(sql: str) -> str:
    """The answer the supervised warm start teaches: a one-line plan naming the tables the gold
    query reads, then the query in the `<answer>` / ```sql format the reward checks."""
    return f"<think>\n{_plan(sql)}\n</think>\n<answer>\n```sql\n{sql.strip()}\n```\n</answer>"


def bird_solution(sql: str) -> str:
    """The multi-turn answer: the plan, then the query as the `<solution>` (SkyRL-SQL's format)."""
    return f"<think>\n{_plan(sql)}\n</think>\n<solution>{sql.strip()}</solution>"


def bird_look(sql: str) -> str:
    """A multi-turn first turn: a look at the first table the gold query reads."""
    tables = _tables(sql) or ["sqlite_master"]
    table = tables[0] if " " not in tables[0] else f"`{tables[0]}`"
    return f"<think>\nLook at {tables[0]}.\n</think>\n<sql>SELECT * FROM {table} LIMIT 3</sql>"


def _observation(row: dict[str, Any], action: str, max_turns: int) -> str:
    step = BirdSQLEpisode.from_row(row, max_turns=max_turns).step(action)
    if step.observation is None:
        raise ValueError(f"max_turns={max_turns}: a first look needs a second turn to answer in")
    return step.observation


def _bird_task(max_turns: int = 1) -> DemoTask:
    compact = SchemaPromptOptions(
        sample_rows=0, example_values=0, include_descriptions=False, include_foreign_keys=False
    )
    options = PreprocessOptions(schema_prompt=compact, max_turns=None if max_turns == 1 else max_turns)
    cache = SchemaPromptCache(compact)
    root = sample_dir()
    rows: dict[str, list[dict[str, Any]]] = {}
    for split_name in (BIRD_TRAIN_SPLIT, BIRD_HELDOUT_SPLIT):
        split = load_split(root, split_name)
        rows[split_name], _summary = bird_preprocess.build_rows(split, cache, options)
    train = rows[BIRD_TRAIN_SPLIT]
    target = bird_target if max_turns == 1 else bird_solution
    return DemoTask(
        name="bird",
        train_rows=train,
        heldout_rows=rows[BIRD_HELDOUT_SPLIT],
        train_targets=[target(row["reward_model"]["ground_truth"]) for row in train],
        max_turns=max_turns,
    )


def _bird_ex(rows: Sequence[dict[str, Any]], responses: Sequence[str]) -> HeldoutScore:
    """Official EX: every extracted prediction and gold query executed, result sets compared."""

    questions: list[BirdQuestion] = []
    predictions: dict[int, Prediction] = {}
    db_roots = set()
    for position, (row, response) in enumerate(zip(rows, responses, strict=True)):
        info = row["extra_info"]
        questions.append(
            BirdQuestion(
                index=position,
                db_id=info["db_id"],
                question=info["question"],
                evidence=info["evidence"],
                sql=row["reward_model"]["ground_truth"],
                question_id=info.get("question_id"),
                difficulty=info.get("difficulty"),
            )
        )
        predictions[position] = Prediction(sql=extract_sql(response).sql, db_id=info["db_id"])
        db_roots.add(Path(info["db_path"]).parent.parent)
    if len(db_roots) != 1:
        raise ValueError(f"held-out BIRD rows span several database roots {sorted(db_roots)}: expected one")
    report = evaluate(questions, PredictionFile(format="official", predictions=predictions), db_roots.pop())
    correct, total = report.counts()["total"]
    errors = Counter(v.predicted_error or "correct" for v in report.verdicts)
    return HeldoutScore(
        metric="EX",
        correct=correct,
        total=total,
        errors=dict(errors),
        well_formatted=sum(is_well_formatted(r) for r in responses),
    )


# -- GSM8K ----------------------------------------------------------------------------------------


def _gsm8k_task() -> DemoTask:
    problems = sample_problems()
    if len(problems) <= GSM8K_HELDOUT:
        raise ValueError(f"the bundled GSM8K sample has {len(problems)} problems: too few to hold out")
    train_problems, heldout_problems = problems[:-GSM8K_HELDOUT], problems[-GSM8K_HELDOUT:]
    # SkyRL's environment for the core GSM8K reward is registered as `gsm8k_arctic`.
    train = [dict(row, env_class="gsm8k_arctic") for row in build_gsm8k_rows(train_problems, "train")]
    heldout = [dict(row, env_class="gsm8k_arctic") for row in build_gsm8k_rows(heldout_problems, "test")]
    return DemoTask(
        name="gsm8k",
        train_rows=train,
        heldout_rows=heldout,
        train_targets=[problem.solution for problem in train_problems],
    )


def _gsm8k_accuracy(rows: Sequence[dict[str, Any]], responses: Sequence[str]) -> HeldoutScore:
    verdicts = [
        compute_score("gsm8k", response, row["reward_model"]["ground_truth"])
        for row, response in zip(rows, responses, strict=True)
    ]
    correct = sum(v["score"] == 1.0 for v in verdicts)
    found = sum(bool(v["answer_found"]) for v in verdicts)
    errors = {"correct": correct, "wrong_answer": found - correct, "no_answer": len(verdicts) - found}
    return HeldoutScore(
        metric="accuracy",
        correct=correct,
        total=len(verdicts),
        errors={k: v for k, v in errors.items() if v},
        well_formatted=found,
    )

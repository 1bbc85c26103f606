"""`arctic-rl bird preprocess`: BIRD splits -> parquet files that SkyRL and verl both read.

One row per question (`<out>/<split>.parquet`):
    data_source   "bird"
    prompt        chat messages [{"role", "content"}] (system + user, see `prompt`)
    ability       "text2sql"
    reward_model  {"style": "rule", "ground_truth": gold SQL}
    extra_info    {"split", "index", "question_id", "db_id", "db_path" (absolute), "question",
                   "evidence", "difficulty"}
    env_class     the environment name for SkyRL ("bird" unless told otherwise; "bird_multi_turn"
                  with `max_turns`)

`max_turns` (`--max-turns N`): the multi-turn prompt of `envs.bird.multi_turn` (SkyRL-SQL's
protocol: <sql> queries run against the database, then a <solution>), saying the model has N turns;
the framework's own turn limit (SkyRL's `generator.max_turns`) must be N too.

The schema prompt is built once per database. With `max_prompt_tokens` and a local tokenizer,
questions whose chat-templated prompt is longer are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from arctic_rl_core.envs.bird.dataset import BirdSplit, load_split
from arctic_rl_core.envs.bird.prompt import build_messages, build_multi_turn_messages
from arctic_rl_core.envs.bird.schema_prompt import SchemaPromptCache, SchemaPromptOptions

DATA_SOURCE = "bird"
ABILITY = "text2sql"
SINGLE_TURN_ENV, MULTI_TURN_ENV = "bird", "bird_multi_turn"


class PreprocessOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    splits: tuple[str, ...] = ("train", "dev")
    skip_missing: bool = False
    schema_prompt: SchemaPromptOptions = SchemaPromptOptions()
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    tokenizer_path: str | None = None
    env_class: str | None = Field(
        default=None, min_length=1
    )  # None: "bird", or "bird_multi_turn" with max_turns
    max_turns: int | None = Field(default=None, ge=1)  # None: the single-turn prompt

    @property
    def row_env_class(self) -> str:
        if self.env_class is not None:
            return self.env_class
        return SINGLE_TURN_ENV if self.max_turns is None else MULTI_TURN_ENV

    @model_validator(mode="after")
    def _tokens_need_tokenizer(self) -> PreprocessOptions:
        if (self.max_prompt_tokens is None) != (self.tokenizer_path is None):
            raise ValueError(
                f"max_prompt_tokens={self.max_prompt_tokens!r} and tokenizer_path={self.tokenizer_path!r}: "
                "give both (--max-prompt-tokens N --tokenizer PATH) or neither"
            )
        return self


@dataclass
class SplitSummary:
    split: str
    questions: int
    written: int
    skipped_missing: int
    dropped_too_long: int
    databases: int
    max_prompt_chars: int
    max_prompt_tokens: int | None
    path: Path
    missing: list[str] = field(default_factory=list)


def parquet_schema():
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("question_id", pa.int64()),
                        ("db_id", pa.string()),
                        ("db_path", pa.string()),
                        ("question", pa.string()),
                        ("evidence", pa.string()),
                        ("difficulty", pa.string()),
                    ]
                ),
            ),
            ("env_class", pa.string()),
        ]
    )


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), path)


class PromptTokenCounter:
    """Counts chat-templated prompt tokens with a local tokenizer (transformers, lazily)."""

    def __init__(self, tokenizer_path: str) -> None:
        from transformers import AutoTokenizer

        path = Path(tokenizer_path)
        if not path.exists():
            raise FileNotFoundError(f"--tokenizer {tokenizer_path}: no such local directory (no downloads)")
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                f"--tokenizer {tokenizer_path}: the tokenizer has no chat template; prompt length is measured "
                "on the chat-templated prompt, so use the policy model's tokenizer"
            )

    def count(self, messages: list[dict[str, str]]) -> int:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)


def build_rows(
    split: BirdSplit,
    schemas: SchemaPromptCache,
    options: PreprocessOptions,
    counter: PromptTokenCounter | None = None,
    advance: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], SplitSummary]:
    rows: list[dict[str, Any]] = []
    dropped = 0
    max_chars = 0
    max_tokens: int | None = None
    for question in split.questions:
        database = split.databases[question.db_id]
        schema = schemas.for_database(database)
        if options.max_turns is None:
            messages = build_messages(schema, question.question, question.evidence)
        else:
            messages = build_multi_turn_messages(
                schema, question.question, question.evidence, options.max_turns
            )
        chars = sum(len(message["content"]) for message in messages)
        if counter is not None:
            tokens = counter.count(messages)
            if options.max_prompt_tokens is not None and tokens > options.max_prompt_tokens:
                dropped += 1
                if advance is not None:
                    advance()
                continue
            max_tokens = tokens if max_tokens is None else max(max_tokens, tokens)
        max_chars = max(max_chars, chars)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": messages,
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": question.sql},
                "extra_info": {
                    "split": split.name,
                    "index": question.index,
                    "question_id": question.question_id,
                    "db_id": question.db_id,
                    "db_path": str(database.db_path.resolve()),
                    "question": question.question,
                    "evidence": question.evidence,
                    "difficulty": question.difficulty,
                },
                "env_class": options.row_env_class,
            }
        )
        if advance is not None:
            advance()
    summary = SplitSummary(
        split=split.name,
        questions=len(split.questions) + split.skipped_questions,
        written=len(rows),
        skipped_missing=split.skipped_questions,
        dropped_too_long=dropped,
        databases=len(split.databases),
        max_prompt_chars=max_chars,
        max_prompt_tokens=max_tokens,
        path=Path(),
        missing=split.missing,
    )
    return rows, summary


def preprocess(
    bird_dir: str | Path, out_dir: str | Path, options: PreprocessOptions, show_progress: bool = True
) -> list[SplitSummary]:
    """Write `<out_dir>/<split>.parquet` for each split; returns one summary per split."""

    splits = [load_split(bird_dir, name, skip_missing=options.skip_missing) for name in options.splits]
    counter = PromptTokenCounter(options.tokenizer_path) if options.tokenizer_path is not None else None
    schemas = SchemaPromptCache(options.schema_prompt)
    summaries: list[SplitSummary] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress) as progress:
        for split in splits:
            task = progress.add_task(f"bird {split.name}", total=len(split.questions))
            rows, summary = build_rows(split, schemas, options, counter, lambda t=task: progress.advance(t))
            summary.path = Path(out_dir) / f"{split.name}.parquet"
            write_parquet(rows, summary.path)
            summaries.append(summary)
    return summaries

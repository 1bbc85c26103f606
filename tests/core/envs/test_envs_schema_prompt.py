"""The schema prompt: DDL with annotations (multi-word columns too), FKs, samples, knobs, caching."""

from __future__ import annotations

from pathlib import Path

from arctic_rl_core.envs.bird.dataset import load_split
from arctic_rl_core.envs.bird.prompt import SYSTEM_PROMPT, build_messages
from arctic_rl_core.envs.bird.schema_prompt import (
    SchemaPromptCache,
    SchemaPromptOptions,
    build_schema_prompt,
    quote_identifier,
)


def school_db(bird_sample: Path):
    return load_split(bird_sample, "train").databases["school_district"]


def line_of(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(start))


def test_multi_word_columns_keep_their_annotations(bird_sample: Path) -> None:
    database = school_db(bird_sample)
    text = build_schema_prompt(database.db_path, database.read_descriptions(), SchemaPromptOptions())
    free_meal = line_of(text, "`Free Meal Count (K-12)`")
    assert free_meal.startswith("  `Free Meal Count (K-12)` INTEGER, -- ")
    assert "number of K-12 students eligible for free meals" in free_meal
    assert "eligible rate = Free Meal Count (K-12) / Enrollment (K-12)" in free_meal
    assert "e.g. 300, 210, 40" in free_meal
    charter = line_of(text, "charter INTEGER")
    assert "1 = charter school; 0 = not a charter school" in charter and "e.g. 0, 1" in charter
    # a description that only repeats the column name is not printed
    assert (
        line_of(text, "county TEXT")
        == "  county TEXT -- county the district belongs to; e.g. 'Marin', 'Sonoma', 'Monterey'"
    )


def test_keys_foreign_keys_and_sample_rows(bird_sample: Path) -> None:
    database = school_db(bird_sample)
    text = build_schema_prompt(
        database.db_path, database.read_descriptions(), SchemaPromptOptions(sample_rows=2)
    )
    assert "  PRIMARY KEY (school_id, year)," in text
    assert "  FOREIGN KEY (district_id) REFERENCES districts(district_id)" in text
    summary = text.split("Foreign keys:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert summary == [
        "schools.district_id = districts.district_id",
        "test_scores.school_id = schools.school_id",
    ]
    samples = text.split("Sample rows:\n", 1)[1]
    assert (
        "districts:\ndistrict_id | District Name | county\n1 | 'Alder Valley Unified' | 'Marin'\n" in samples
    )
    assert samples.count("\n1 | 'Alder High'") == 1 and "3 | 'Maple Charter Academy'" not in samples


def test_knobs_shrink_the_prompt(bird_sample: Path) -> None:
    database = school_db(bird_sample)
    descriptions = database.read_descriptions()
    full = build_schema_prompt(database.db_path, descriptions, SchemaPromptOptions())
    compact = build_schema_prompt(
        database.db_path,
        descriptions,
        SchemaPromptOptions(
            sample_rows=0, example_values=0, include_descriptions=False, include_foreign_keys=False
        ),
    )
    assert "Sample rows:" not in compact and "Foreign keys:" not in compact and " -- " not in compact
    assert "CREATE TABLE schools (" in compact and "`Free Meal Count (K-12)` INTEGER," in compact
    assert len(compact) < len(full) / 3
    short = build_schema_prompt(database.db_path, descriptions, SchemaPromptOptions(max_value_chars=8))
    assert "'Alder..." in short


def test_quote_identifier() -> None:
    assert quote_identifier("district_id") == "district_id"
    assert quote_identifier("Free Meal Count (K-12)") == "`Free Meal Count (K-12)`"
    assert quote_identifier("order") == "`order`"
    assert quote_identifier("we`ird") == "`we``ird`"


def test_cache_builds_once_per_database(bird_sample: Path) -> None:
    split = load_split(bird_sample, "train")
    cache = SchemaPromptCache(SchemaPromptOptions(sample_rows=1))
    texts = [cache.for_database(split.databases[q.db_id]) for q in split.questions]
    assert cache.builds == 2 and len(set(texts)) == 2


def test_messages_carry_engine_schema_question_evidence() -> None:
    messages = build_messages("CREATE TABLE t (a INTEGER);", "How many rows?", "rows refers to COUNT(*)")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert (
        messages[0]["content"] == SYSTEM_PROMPT and "<think>" in SYSTEM_PROMPT and "```sql" in SYSTEM_PROMPT
    )
    user = messages[1]["content"]
    assert user.startswith("Database engine: SQLite\n\nDatabase schema:\nCREATE TABLE t (a INTEGER);\n\n")
    assert "Question: How many rows?\nEvidence: rows refers to COUNT(*)\n" in user
    assert user.endswith("<answer>\n```sql\nSELECT ...\n```\n</answer>")
    assert "Evidence: none" in build_messages("s", "q", "  ")[1]["content"]

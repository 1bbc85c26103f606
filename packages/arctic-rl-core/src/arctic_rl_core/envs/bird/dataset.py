"""Load BIRD in its official layout: question files, SQLite databases, description CSVs.

    <bird_dir>/train/train.json + train/train_databases/<db>/<db>.sqlite
    <bird_dir>/dev/dev.json     + dev/dev_databases/<db>/<db>.sqlite
    (or a versioned dev folder such as dev_20240627/, holding dev.json and dev_databases/)
    <db folder>/database_description/<table>.csv

Question fields: `db_id`, `question`, `SQL` (required), `evidence` (optional, empty when
absent), `question_id` and `difficulty` (optional; BIRD train has neither).
Description CSVs have the columns original_column_name, column_name, column_description,
data_format, value_description; they are read as UTF-8 (with or without BOM), falling back to
latin-1 when that fails.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DESCRIPTION_COLUMNS = (
    "original_column_name",
    "column_name",
    "column_description",
    "data_format",
    "value_description",
)
_VERSIONED_SPLIT = re.compile(r"(?P<split>[a-z]+)_(?P<version>\d{8})")


class BirdDataError(ValueError):
    """The BIRD directory is missing something or holds malformed data."""


@dataclass(frozen=True)
class BirdQuestion:
    """One BIRD question. `index` is its position in the question file."""

    index: int
    db_id: str
    question: str
    evidence: str
    sql: str
    question_id: int | None
    difficulty: str | None


@dataclass(frozen=True)
class ColumnDescription:
    """One row of a `database_description/<table>.csv` file."""

    original_column_name: str
    column_name: str
    column_description: str
    data_format: str
    value_description: str


@dataclass(frozen=True)
class TableDescriptions:
    """The description CSV of one table, with the encoding it was read in."""

    table: str
    path: Path
    encoding: str
    columns: tuple[ColumnDescription, ...]

    def for_column(self, name: str) -> ColumnDescription | None:
        wanted = name.strip().lower()
        for column in self.columns:
            if column.original_column_name.strip().lower() == wanted:
                return column
        return None


@dataclass(frozen=True)
class BirdDatabase:
    """One database folder: the SQLite file and its description folder."""

    db_id: str
    db_path: Path
    description_dir: Path

    def read_descriptions(self) -> dict[str, TableDescriptions]:
        """Description CSVs keyed by lower-cased table name (the CSV file's stem)."""
        found: dict[str, TableDescriptions] = {}
        for path in sorted(self.description_dir.glob("*.csv")):
            found[path.stem.lower()] = read_description_csv(path)
        return found


@dataclass
class BirdSplit:
    """One split: its questions (those whose database is present) and databases."""

    name: str
    split_dir: Path
    questions_path: Path
    db_root: Path
    questions: list[BirdQuestion]
    databases: dict[str, BirdDatabase]
    skipped_questions: int = 0
    missing: list[str] = field(default_factory=list)


def decode_description_bytes(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 with or without BOM, else latin-1 (which accepts any byte)."""
    try:
        return data.decode("utf-8-sig"), "utf-8-sig"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


def read_description_csv(path: str | Path) -> TableDescriptions:
    """Parse one description CSV; a missing required column is an error naming the file."""
    path = Path(path)
    text, encoding = decode_description_bytes(path.read_bytes())
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip().lower() for name in (reader.fieldnames or [])]
    missing = [name for name in DESCRIPTION_COLUMNS if name not in header]
    if missing:
        raise BirdDataError(
            f"description CSV {path}: missing column(s) {missing}; found {header}. "
            f"Each description CSV needs the header {','.join(DESCRIPTION_COLUMNS)}"
        )
    columns: list[ColumnDescription] = []
    for raw in reader:
        row = {(key or "").strip().lower(): (value or "") for key, value in raw.items() if key is not None}
        if not row.get("original_column_name", "").strip():
            continue
        columns.append(ColumnDescription(**{name: row[name].strip() for name in DESCRIPTION_COLUMNS}))
    return TableDescriptions(table=path.stem, path=path, encoding=encoding, columns=tuple(columns))


def _optional_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BirdDataError(f"{where}: question_id must be an integer, got {value!r}")
    return value


def load_questions(path: str | Path) -> list[BirdQuestion]:
    """Read a BIRD question file (train.json / dev.json / a list in the same format)."""
    path = Path(path)
    if not path.is_file():
        raise BirdDataError(f"question file {path} does not exist")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BirdDataError(f"question file {path}: not valid UTF-8 JSON ({error})") from error
    if not isinstance(entries, list):
        raise BirdDataError(
            f"question file {path}: expected a JSON list of questions, got {type(entries).__name__}"
        )
    questions: list[BirdQuestion] = []
    for index, entry in enumerate(entries):
        where = f"{path} entry {index}"
        if not isinstance(entry, dict):
            raise BirdDataError(f"{where}: expected an object, got {type(entry).__name__}")
        for key in ("db_id", "question", "SQL"):
            if not isinstance(entry.get(key), str):
                raise BirdDataError(f"{where}: field {key!r} must be a string, got {entry.get(key)!r}")
        evidence = entry.get("evidence", "")
        difficulty = entry.get("difficulty")
        if not isinstance(evidence, str) or not (difficulty is None or isinstance(difficulty, str)):
            raise BirdDataError(f"{where}: 'evidence' and 'difficulty' must be strings when present")
        questions.append(
            BirdQuestion(
                index=index,
                db_id=entry["db_id"],
                question=entry["question"],
                evidence=evidence,
                sql=entry["SQL"],
                question_id=_optional_int(entry.get("question_id"), where),
                difficulty=difficulty,
            )
        )
    return questions


def find_split_dir(bird_dir: str | Path, split: str) -> Path:
    """`<bird_dir>/<split>`, else the newest versioned `<split>_YYYYMMDD` folder."""
    root = Path(bird_dir)
    if not root.is_dir():
        raise BirdDataError(f"BIRD directory {root} does not exist")
    plain = root / split
    if plain.is_dir():
        return plain
    versioned = sorted(
        (
            path
            for path in root.iterdir()
            if path.is_dir() and (m := _VERSIONED_SPLIT.fullmatch(path.name)) and m.group("split") == split
        ),
        key=lambda path: path.name,
    )
    if versioned:
        return versioned[-1]
    raise BirdDataError(
        f"BIRD directory {root} has no {split!r} split: expected {plain} or a versioned folder such as "
        f"{root / (split + '_20240627')}"
    )


def database_paths(db_root: Path, db_id: str) -> BirdDatabase:
    folder = db_root / db_id
    return BirdDatabase(
        db_id=db_id, db_path=folder / f"{db_id}.sqlite", description_dir=folder / "database_description"
    )


def load_split(bird_dir: str | Path, split: str, *, skip_missing: bool = False) -> BirdSplit:
    """Load one split; every missing database file or description folder is listed in one error.

    With `skip_missing=True`, questions on an incomplete database are skipped instead, and the
    returned split counts them (`skipped_questions`) and lists what was missing (`missing`).
    """
    split_dir = find_split_dir(bird_dir, split)
    questions_path = split_dir / f"{split}.json"
    db_root = split_dir / f"{split}_databases"
    absent = [str(path) for path in (questions_path, db_root) if not path.exists()]
    if absent:
        raise BirdDataError(
            f"BIRD {split!r} split in {split_dir} is incomplete; missing: {', '.join(absent)}"
        )
    questions = load_questions(questions_path)
    databases: dict[str, BirdDatabase] = {}
    missing: list[str] = []
    incomplete: set[str] = set()
    for db_id in sorted({question.db_id for question in questions}):
        database = database_paths(db_root, db_id)
        gaps = [str(p) for p in (database.db_path, database.description_dir) if not p.exists()]
        if gaps:
            missing.extend(gaps)
            incomplete.add(db_id)
        else:
            databases[db_id] = database
    if missing and not skip_missing:
        listing = "\n  ".join(missing)
        raise BirdDataError(
            f"BIRD {split!r} split: {len(missing)} missing path(s) for {len(incomplete)} database(s):\n  {listing}\n"
            "Download the complete split, or pass --skip-missing to skip the questions on these databases"
        )
    kept = [question for question in questions if question.db_id not in incomplete]
    return BirdSplit(
        name=split,
        split_dir=split_dir,
        questions_path=questions_path,
        db_root=db_root,
        questions=kept,
        databases=databases,
        skipped_questions=len(questions) - len(kept),
        missing=missing,
    )


def parse_splits(value: str | Sequence[str]) -> list[str]:
    """'train,dev' -> ['train', 'dev']; only train and dev exist in BIRD."""
    names = [part.strip() for part in (value.split(",") if isinstance(value, str) else value)]
    bad = [name for name in names if name not in ("train", "dev")]
    if bad or not names:
        raise BirdDataError(f"--split {value!r}: each split must be 'train' or 'dev' (comma-separated)")
    return list(dict.fromkeys(names))

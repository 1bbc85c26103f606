"""Build the bundled BIRD-format sample from the source data in `data/`.

The output has the official layout:

    train/train.json                      (db_id, question, evidence, SQL, difficulty)
    train/train_databases/<db>/<db>.sqlite
    train/train_databases/<db>/database_description/<table>.csv
    dev/dev.json                          (question_id, db_id, question, evidence, SQL, difficulty)
    dev/dev_databases/<db>/...

Deterministic: the same source data gives the same databases, CSVs and JSON. Description CSVs
are written in the encoding each table names (UTF-8 with BOM, plain UTF-8, latin-1), as the
real BIRD files vary. Every gold query is executed once and checked against the answer written
next to it in `questions.json`, so a broken sample fails at build time, not in a test.

Run as a script: `python -m arctic_rl_core.envs.bird.sample.builder OUT_DIR`.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).with_name("data")
DESCRIPTION_HEADER = (
    "original_column_name",
    "column_name",
    "column_description",
    "data_format",
    "value_description",
)
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def source_files() -> list[Path]:
    """Every file whose bytes define the sample (data and this builder)."""
    return [*sorted(DATA_DIR.glob("*.json")), Path(__file__)]


def _quote(name: str) -> str:
    return name if _PLAIN_IDENTIFIER.fullmatch(name) else f"`{name}`"


def _create_table_sql(table: dict[str, Any]) -> str:
    lines = [f"    {_quote(col['name'])} {col['type']}" for col in table["columns"]]
    lines.append(f"    PRIMARY KEY ({', '.join(_quote(c) for c in table['primary_key'])})")
    for fk in table["foreign_keys"]:
        columns = ", ".join(_quote(c) for c in fk["columns"])
        ref_columns = ", ".join(_quote(c) for c in fk["ref_columns"])
        lines.append(f"    FOREIGN KEY ({columns}) REFERENCES {_quote(fk['references'])} ({ref_columns})")
    return f"CREATE TABLE {_quote(table['name'])}\n(\n" + ",\n".join(lines) + "\n)"


def _description_csv_bytes(table: dict[str, Any]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(DESCRIPTION_HEADER)
    for col in table["columns"]:
        writer.writerow(
            [
                col["name"],
                col["column_name"],
                col["description"],
                col["data_format"],
                col["value_description"],
            ]
        )
    return buffer.getvalue().encode(table["description_encoding"])


def _build_database(spec: dict[str, Any], db_dir: Path) -> Path:
    db_dir.mkdir(parents=True)
    db_path = db_dir / f"{spec['db_id']}.sqlite"
    connection = sqlite3.connect(db_path)
    try:
        for table in spec["tables"]:
            connection.execute(_create_table_sql(table))
            placeholders = ", ".join("?" for _ in table["columns"])
            connection.executemany(
                f"INSERT INTO {_quote(table['name'])} VALUES ({placeholders})", table["rows"]
            )
        connection.commit()
    finally:
        connection.close()
    description_dir = db_dir / "database_description"
    description_dir.mkdir()
    for table in spec["tables"]:
        (description_dir / f"{table['name']}.csv").write_bytes(_description_csv_bytes(table))
    return db_path


def _check_gold(db_path: Path, question: dict[str, Any]) -> None:
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = set(connection.execute(question["SQL"]).fetchall())
    finally:
        connection.close()
    expected = {tuple(row) for row in question["expected"]}
    if rows != expected:
        raise ValueError(
            f"sample question {question['question']!r}: gold SQL returned {sorted(rows)}, "
            f"expected {sorted(expected)}; fix data/questions.json"
        )


def build_sample(out_dir: str | Path) -> Path:
    """Write the sample into `out_dir` (which must not exist or be empty); returns it."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"sample output directory {out} is not empty; pass a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    db_paths: dict[str, Path] = {}
    splits: dict[str, str] = {}
    for spec_path in sorted(DATA_DIR.glob("*.json")):
        if spec_path.name == "questions.json":
            continue
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        split = spec["split"]
        db_dir = out / split / f"{split}_databases" / spec["db_id"]
        db_paths[spec["db_id"]] = _build_database(spec, db_dir)
        splits[spec["db_id"]] = split
    questions = json.loads((DATA_DIR / "questions.json").read_text(encoding="utf-8"))
    by_split: dict[str, list[dict[str, Any]]] = {"train": [], "dev": []}
    for question in questions:
        if splits[question["db_id"]] != question["split"]:
            raise ValueError(
                f"sample question {question['question']!r} is in split {question['split']!r} "
                f"but database {question['db_id']!r} is in {splits[question['db_id']]!r}"
            )
        _check_gold(db_paths[question["db_id"]], question)
        entry = {key: question[key] for key in ("db_id", "question", "evidence", "SQL", "difficulty")}
        by_split[question["split"]].append(entry)
    # As in the official files: dev entries carry a question_id, train entries do not.
    dev = [{"question_id": index, **entry} for index, entry in enumerate(by_split["dev"])]
    for split, entries in (("train", by_split["train"]), ("dev", dev)):
        text = json.dumps(entries, indent=4, ensure_ascii=False) + "\n"
        (out / split / f"{split}.json").write_text(text, encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m arctic_rl_core.envs.bird.sample.builder OUT_DIR", file=sys.stderr)
        return 2
    print(build_sample(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

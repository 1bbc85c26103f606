"""The schema part of a BIRD prompt, computed once per database.

For each table: CREATE TABLE DDL regenerated from SQLite's own catalog (PRAGMA table_xinfo and
foreign_key_list), so multi-word names such as `Free Meal Count (K-12)` are handled as whole
identifiers (quoted with backticks, as in BIRD's SQL) instead of being split on spaces. Each
column line ends with a comment: its description and value description from the description
CSV, then example values. After the tables: a foreign-key summary and a few sample rows per
table. The database is opened read-only; the text depends only on the database, the CSVs and
the options.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import urllib.parse
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from arctic_rl_core.envs.bird.dataset import BirdDatabase, TableDescriptions

_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words that cannot be bare identifiers in the DDL we print (a small, practical subset).
# fmt: off
_KEYWORDS = frozenset((
    "abort", "action", "add", "all", "alter", "and", "as", "asc", "between", "by", "case", "check",
    "collate", "column", "constraint", "create", "cross", "current", "default", "delete", "desc",
    "distinct", "drop", "else", "end", "escape", "except", "exists", "foreign", "from", "full", "glob",
    "group", "having", "in", "index", "inner", "insert", "intersect", "into", "is", "join", "key",
    "left", "like", "limit", "match", "natural", "not", "null", "of", "on", "or", "order", "outer",
    "primary", "references", "right", "select", "set", "table", "then", "to", "transaction", "union",
    "unique", "update", "using", "values", "when", "where", "with",
))
# fmt: on


class SchemaPromptOptions(BaseModel):
    """What the schema prompt contains. The defaults suit real BIRD databases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_rows: int = Field(default=3, ge=0, description="sample rows shown per table (max_schema_rows)")
    example_values: int = Field(default=3, ge=0, description="distinct example values per column")
    max_value_chars: int = Field(default=40, ge=8, description="longer values are cut with '...'")
    include_descriptions: bool = Field(default=True, description="column and value descriptions")
    max_description_chars: int = Field(default=160, ge=16, description="longer descriptions are cut")
    include_foreign_keys: bool = Field(default=True, description="the foreign-key summary")


def quote_identifier(name: str) -> str:
    """A bare identifier when SQLite accepts it, else BIRD-style backticks."""
    if _PLAIN_IDENTIFIER.fullmatch(name) and name.lower() not in _KEYWORDS:
        return name
    return "`" + name.replace("`", "``") + "`"


def _sql_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _render_value(value: object, limit: int) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        return "'" + _clip(value, limit).replace("'", "''") + "'"
    return str(value)


def _column_comment(
    column: str, descriptions: TableDescriptions | None, examples: list[object], options: SchemaPromptOptions
) -> str:
    parts: list[str] = []
    if options.include_descriptions and descriptions is not None:
        entry = descriptions.for_column(column)
        if entry is not None:
            described = entry.column_description or entry.column_name
            if described and described.strip().lower() != column.strip().lower():
                parts.append(_clip(described, options.max_description_chars))
            if entry.value_description:
                parts.append(_clip(entry.value_description, options.max_description_chars))
    if examples:
        rendered = ", ".join(_render_value(value, options.max_value_chars) for value in examples)
        parts.append(f"e.g. {rendered}")
    return "; ".join(parts)


def build_schema_prompt(
    db_path: str | Path,
    descriptions: dict[str, TableDescriptions] | None = None,
    options: SchemaPromptOptions | None = None,
) -> str:
    """The schema text for one database (see the module doc). `descriptions` is keyed by
    lower-cased table name, as `BirdDatabase.read_descriptions()` returns it."""
    options = options if options is not None else SchemaPromptOptions()
    descriptions = descriptions or {}
    uri = "file:" + urllib.parse.quote(str(Path(db_path).resolve())) + "?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
        blocks: list[str] = []
        fk_summary: list[str] = []
        sample_blocks: list[str] = []
        for table in tables:
            columns = connection.execute(f"PRAGMA table_xinfo({_sql_name(table)})").fetchall()
            columns = [col for col in columns if col[6] == 0]  # hidden == 0: real columns only
            foreign_keys = connection.execute(f"PRAGMA foreign_key_list({_sql_name(table)})").fetchall()
            table_descriptions = descriptions.get(table.lower())
            definitions: list[tuple[str, str]] = []
            primary_key = [col[1] for col in sorted(columns, key=lambda c: c[5]) if col[5] > 0]
            for _cid, name, col_type, notnull, _default, pk, _hidden in columns:
                examples: list[object] = []
                if options.example_values > 0:
                    examples = [
                        row[0]
                        for row in connection.execute(
                            f"SELECT DISTINCT {_sql_name(name)} FROM {_sql_name(table)} "
                            f"WHERE {_sql_name(name)} IS NOT NULL LIMIT {options.example_values}"
                        )
                    ]
                definition = f"{quote_identifier(name)} {col_type or ''}".rstrip()
                if pk > 0 and len(primary_key) == 1:
                    definition += " PRIMARY KEY"
                if notnull and pk == 0:
                    definition += " NOT NULL"
                definitions.append((definition, _column_comment(name, table_descriptions, examples, options)))
            if len(primary_key) > 1:
                definitions.append(
                    (f"PRIMARY KEY ({', '.join(quote_identifier(c) for c in primary_key)})", "")
                )
            grouped: dict[int, list[tuple]] = {}
            for fk in foreign_keys:  # (id, seq, table, from, to, ...): one row per column
                grouped.setdefault(fk[0], []).append(fk)
            for _fk_id, parts in sorted(grouped.items()):
                parts.sort(key=lambda part: part[1])
                ref_table = parts[0][2]
                from_cols = [part[3] for part in parts]
                to_cols = [part[4] if part[4] is not None else "rowid" for part in parts]
                from_text = ", ".join(quote_identifier(c) for c in from_cols)
                to_text = ", ".join(quote_identifier(c) for c in to_cols)
                definitions.append(
                    (f"FOREIGN KEY ({from_text}) REFERENCES {quote_identifier(ref_table)}({to_text})", "")
                )
                for from_col, to_col in zip(from_cols, to_cols, strict=True):
                    fk_summary.append(
                        f"{quote_identifier(table)}.{quote_identifier(from_col)} = "
                        f"{quote_identifier(ref_table)}.{quote_identifier(to_col)}"
                    )
            lines = [f"CREATE TABLE {quote_identifier(table)} ("]
            for position, (definition, comment) in enumerate(definitions):
                separator = "," if position < len(definitions) - 1 else ""
                lines.append(f"  {definition}{separator}" + (f" -- {comment}" if comment else ""))
            lines.append(");")
            blocks.append("\n".join(lines))
            if options.sample_rows > 0:
                rows = connection.execute(
                    f"SELECT * FROM {_sql_name(table)} LIMIT {options.sample_rows}"
                ).fetchall()
                if rows:
                    header = " | ".join(col[1] for col in columns)
                    body = [
                        " | ".join(_render_value(v, options.max_value_chars) for v in row) for row in rows
                    ]
                    sample_blocks.append(f"{quote_identifier(table)}:\n" + "\n".join([header, *body]))
    finally:
        connection.close()
    text = "\n\n".join(blocks)
    if options.include_foreign_keys and fk_summary:
        text += "\n\nForeign keys:\n" + "\n".join(fk_summary)
    if sample_blocks:
        text += "\n\nSample rows:\n" + "\n\n".join(sample_blocks)
    return text


class SchemaPromptCache:
    """Schema prompts computed once per (database file, options); thread-safe."""

    def __init__(self, options: SchemaPromptOptions | None = None) -> None:
        self.options = options if options is not None else SchemaPromptOptions()
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}
        self.builds = 0

    def for_database(self, database: BirdDatabase) -> str:
        key = str(database.db_path.resolve())
        with self._lock:
            cached = self._texts.get(key)
        if cached is not None:
            return cached
        text = build_schema_prompt(database.db_path, database.read_descriptions(), self.options)
        with self._lock:
            self._texts.setdefault(key, text)
            self.builds += 1
            return self._texts[key]

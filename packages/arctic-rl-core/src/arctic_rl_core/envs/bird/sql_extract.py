"""Find the SQL in a model response, and check the answer format.

Extraction looks at the text after the last `</think>` (the whole text when there is none)
and takes, in this order of precedence:
1. the last ```sql fenced block;
2. the last other fenced block that contains SELECT;
3. the last JSON object with a string "sql" field (`{"sql": "..."}`);
4. raw SQL: from the first SELECT (or WITH) keyword to the first semicolon or the end.
The first rule that finds non-empty SQL wins.

Well formatted: one `</think>` (and at most one `<think>`, before it), then, after it and
surrounding whitespace only, one `<answer>...</answer>` holding a non-empty ```sql block.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Literal

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

_SQL_FENCE = re.compile(r"```[ \t]*sql[ \t]*\n?(.*?)```", re.IGNORECASE | re.DOTALL)
_ANY_FENCE = re.compile(r"```[^\n`]*\n?(.*?)```", re.DOTALL)
_SELECT_WORD = re.compile(r"\bselect\b", re.IGNORECASE)
_JSON_SQL_FIELD = re.compile(r'"sql"\s*:\s*("(?:[^"\\]|\\.)*")', re.IGNORECASE | re.DOTALL)
# Raw SQL starts at `SELECT ` or at `WITH <name>` followed, before the next semicolon, by `AS (`.
# Found in one pass each (a lazy `with ...*? as (` regex rescans to the end from every WITH: 8 s
# on 64 KB of "with with ...").
_SELECT_HEAD = re.compile(r"\bselect\s", re.IGNORECASE)
_WITH_HEAD = re.compile(r"\bwith\s+[A-Za-z_`\"\[]", re.IGNORECASE)
_AS_PAREN = re.compile(r"\bas\s*\(", re.IGNORECASE)
_SEMICOLON = re.compile(";")
_ANSWER_BLOCK = re.compile(r"\A\s*<answer>(.*)</answer>\s*\Z", re.DOTALL)

Source = Literal["sql_block", "code_block", "json", "raw", "none"]


@dataclass(frozen=True)
class ExtractedSQL:
    sql: str | None
    source: Source


def answer_region(response: str) -> str:
    """The text after the last `</think>`, or the whole response when there is none."""
    position = response.rfind(THINK_CLOSE)
    return response if position < 0 else response[position + len(THINK_CLOSE) :]


def _last_nonempty(matches: list[str]) -> str | None:
    for candidate in reversed(matches):
        if candidate.strip():
            return candidate.strip()
    return None


def _from_json(text: str) -> str | None:
    found: list[str] = []
    for match in _JSON_SQL_FIELD.finditer(text):
        try:
            value = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(value, str):
            found.append(value)
    return _last_nonempty(found)


def _raw(text: str) -> str | None:
    text = text.replace(ANSWER_OPEN, " ").replace(ANSWER_CLOSE, " ")
    start = _raw_start(text)
    if start is None:
        return None
    statement = text[start:].split(";", 1)[0].strip()
    return statement or None


def _raw_start(text: str) -> int | None:
    """Where raw SQL starts: the first `SELECT ` or the first `WITH <name>` that has an `AS (` after
    it in the same statement (before the next semicolon). Linear in the text."""
    select = _SELECT_HEAD.search(text)
    limit = len(text) if select is None else select.start()
    semicolons = [m.start() for m in _SEMICOLON.finditer(text)]
    # Statement (index of the semicolon that ends it) -> where its last `AS (` starts.
    last_as_paren = {bisect_left(semicolons, m.start()): m.start() for m in _AS_PAREN.finditer(text)}
    for match in _WITH_HEAD.finditer(text):
        if match.start() >= limit:
            break
        as_paren = last_as_paren.get(bisect_left(semicolons, match.start()))
        if as_paren is not None and as_paren >= match.end():
            return match.start()
    return None if select is None else select.start()


def extract_sql(response: str) -> ExtractedSQL:
    """The SQL of a response and which rule found it (see the module doc)."""
    region = answer_region(response)
    sql = _last_nonempty(_SQL_FENCE.findall(region))
    if sql is not None:
        return ExtractedSQL(sql, "sql_block")
    blocks = [block for block in _ANY_FENCE.findall(region) if _SELECT_WORD.search(block)]
    sql = _last_nonempty(blocks)
    if sql is not None:
        return ExtractedSQL(sql, "code_block")
    sql = _from_json(region)
    if sql is not None:
        return ExtractedSQL(sql, "json")
    sql = _raw(region)
    if sql is not None:
        return ExtractedSQL(sql, "raw")
    return ExtractedSQL(None, "none")


def is_well_formatted(response: str) -> bool:
    """True when the response follows the prompt's <think>/<answer>/```sql format."""
    if response.count(THINK_CLOSE) != 1 or response.count(THINK_OPEN) > 1:
        return False
    if THINK_OPEN in response and response.index(THINK_OPEN) > response.index(THINK_CLOSE):
        return False
    match = _ANSWER_BLOCK.match(answer_region(response))
    if match is None:
        return False
    inner = match.group(1)
    if ANSWER_OPEN in inner or ANSWER_CLOSE in inner:
        return False
    return _last_nonempty(_SQL_FENCE.findall(inner)) is not None

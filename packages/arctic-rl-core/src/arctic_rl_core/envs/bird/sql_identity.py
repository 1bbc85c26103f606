"""When two SQL strings are the same query: the key used to execute duplicates once.

`execution_key(sql)` drops comments and collapses whitespace runs to one space, outside string
literals and quoted identifiers ('...', "...", `...`, [...]), exactly as SQLite's lexer treats
them: whitespace and comments only separate tokens; then one final semicolon is dropped (not
two). Everything else, including keyword case, is kept, so two SQL strings with the same key
give the same result (or the same error). Text with a NUL character is its own key (the sqlite3
module rejects it).
"""

from __future__ import annotations

_WHITESPACE = frozenset(" \t\n\r\f")
_QUOTE_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}


def _quoted_end(sql: str, start: int) -> int:
    """Index just past the quoted token that opens at `start` (doubled closers are escapes)."""
    closer = _QUOTE_CLOSERS[sql[start]]
    position = start + 1
    while True:
        found = sql.find(closer, position)
        if found < 0:
            return len(sql)
        if closer != "]" and sql.startswith(closer * 2, found):
            position = found + 2
            continue
        return found + 1


def execution_key(sql: str) -> str:
    if "\x00" in sql:
        return sql
    pieces: list[str] = []
    separator_pending = False
    index = 0
    length = len(sql)
    while index < length:
        char = sql[index]
        if char in _WHITESPACE:
            separator_pending = True
            index += 1
            continue
        if sql.startswith("--", index):
            newline = sql.find("\n", index)
            index = length if newline < 0 else newline + 1
            separator_pending = True
            continue
        if sql.startswith("/*", index):
            close = sql.find("*/", index + 2)
            index = length if close < 0 else close + 2
            separator_pending = True
            continue
        if separator_pending and pieces:
            pieces.append(" ")
        separator_pending = False
        if char in _QUOTE_CLOSERS:
            end = _quoted_end(sql, index)
            pieces.append(sql[index:end])
            index = end
        else:
            pieces.append(char)
            index += 1
    key = "".join(pieces)
    # One trailing semicolon ends the statement and changes nothing ("SELECT 1;" runs as
    # "SELECT 1"); a second one is an empty statement that the sqlite3 module rejects, so
    # "SELECT 1;;" keeps its own key.
    if key.endswith(";") and not key[:-1].rstrip().endswith(";"):
        key = key[:-1].rstrip()
    return key

"""When two SQL strings are the same query: the key used to execute duplicates once.

`execution_key(sql)` drops comments and collapses whitespace runs to one space, outside string
literals and quoted identifiers ('...', "...", `...`, [...]), exactly as SQLite's lexer treats
them: whitespace and comments only separate tokens; then one final semicolon is dropped (not
two). Everything else, including keyword case, is kept, so two SQL strings with the same key
give the same result (or the same error). Text with a NUL character is its own key (the sqlite3
module rejects it).
"""

from __future__ import annotations

import re

# One alternative per lexical unit that matters here. Quoted units run to their closer (a
# doubled closer is an escape; [...] has none) or, unterminated, to the end of the text.
_UNITS = re.compile(
    r"""
      (?P<quoted> '(?:[^']|'')*'? | "(?:[^"]|"")*"? | `(?:[^`]|``)*`? | \[[^\]]*\]? )
    | (?P<gap> (?: [ \t\n\r\f]+ | --[^\n]*(?:\n|\Z) | /\*.*?(?:\*/|\Z) )+ )
    """,
    re.VERBOSE | re.DOTALL,
)


def execution_key(sql: str) -> str:
    if "\x00" in sql:
        return sql
    pieces: list[str] = []
    position = 0
    for match in _UNITS.finditer(sql):
        pieces.append(sql[position : match.start()])
        if match.group("quoted") is not None:
            pieces.append(match.group("quoted"))
        elif match.start() > 0 and match.end() < len(sql):  # a gap at either end is dropped
            pieces.append(" ")
        position = match.end()
    pieces.append(sql[position:])
    key = "".join(pieces)
    # One trailing semicolon ends the statement and changes nothing ("SELECT 1;" runs as
    # "SELECT 1"); a second one is an empty statement that the sqlite3 module rejects, so
    # "SELECT 1;;" keeps its own key. (A space right before it can only be a gap: quoted units
    # end with their closer, or at the end of the text.)
    if key.endswith(";") and not key[:-1].rstrip(" ").endswith(";"):
        key = key[:-1].rstrip(" ")
    return key

"""SQL extraction precedence, the answer-format check, and execution keys."""

from __future__ import annotations

import sqlite3
import time

import pytest
from arctic_rl_core.envs.bird.sql_extract import extract_sql, is_well_formatted
from arctic_rl_core.envs.bird.sql_identity import execution_key


@pytest.mark.parametrize(
    ("response", "sql", "source"),
    [
        # the last ```sql block after </think> wins over everything else
        (
            "<think>```sql\nSELECT draft\n```</think>```sql\nSELECT a\n```\n```sql\nSELECT b\n```",
            "SELECT b",
            "sql_block",
        ),
        ('<think>x</think>```\nSELECT g FROM t\n```\n{"sql": "SELECT j"}', "SELECT g FROM t", "code_block"),
        ('<think>x</think>```\nnot a query\n```\n{"sql": "SELECT j FROM t"}', "SELECT j FROM t", "json"),
        ('{"sql": "SELECT \\"q\\" FROM t"} then {"sql": "SELECT 2"}', "SELECT 2", "json"),
        (
            "The answer is SELECT name FROM people WHERE id = 3; done.",
            "SELECT name FROM people WHERE id = 3",
            "raw",
        ),
        (
            "<answer>WITH x AS (SELECT 1 AS v) SELECT v FROM x</answer>",
            "WITH x AS (SELECT 1 AS v) SELECT v FROM x",
            "raw",
        ),
        # only the text after the last </think> counts
        ("<think>SELECT hidden FROM t</think> I am not sure.", None, "none"),
        ("", None, "none"),
        ("<think>a</think>```sql\n   \n```", None, "none"),
    ],
)
def test_extraction_precedence(response: str, sql: str | None, source: str) -> None:
    found = extract_sql(response)
    assert (found.sql, found.source) == (sql, source)


def test_without_think_the_whole_text_is_searched() -> None:
    assert extract_sql("```sql\nSELECT 1\n```").sql == "SELECT 1"


@pytest.mark.parametrize(
    ("response", "ok"),
    [
        ("<think>r</think>\n<answer>\n```sql\nSELECT 1\n```\n</answer>", True),
        ("reasoning</think><answer>```sql\nSELECT 1\n```</answer>\n", True),  # <think> in the prompt
        ("<think>r</think><answer>```sql\nSELECT 1\n```</answer> extra words", False),
        ("<think>r</think><answer>SELECT 1</answer>", False),  # no ```sql block
        ("<think>r</think><answer>```sql\n\n```</answer>", False),  # empty block
        ("<answer>```sql\nSELECT 1\n```</answer>", False),  # no </think>
        ("<think>a</think><think>b</think><answer>```sql\nSELECT 1\n```</answer>", False),
        ("</think><think><answer>```sql\nSELECT 1\n```</answer>", False),
        ("<think>r</think><answer>```sql\nSELECT 1\n```</answer><answer>x</answer>", False),
    ],
)
def test_format_check(response: str, ok: bool) -> None:
    assert is_well_formatted(response) is ok


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("SELECT a FROM t", "  SELECT  a\n\tFROM t  ", True),
        ("SELECT a FROM t", "SELECT a FROM t;", True),
        ("SELECT a FROM t", "SELECT a FROM t ; -- trailing comment", True),
        ("SELECT a FROM t", "SELECT /* c */ a FROM t", True),
        ("SELECT a FROM t", "SELECT a FROM t;;", False),  # an empty second statement errors
        ("SELECT a FROM t WHERE b = 'x  y'", "SELECT a FROM t WHERE b = 'x y'", False),  # literal kept
        ('SELECT "a  b" FROM t', 'SELECT "a b" FROM t', False),
        ("SELECT a FROM t WHERE b = '--'", "SELECT a FROM t WHERE b = ''", False),
        ("SELECT a FROM t", "select a from t", False),  # case is kept (conservative)
        ("SELECT 1", "SELECT 1\x00", False),
        ("SELECT [a  b] FROM t", "SELECT [a b] FROM t", False),
        ("SELECT 'it''s  x'", "SELECT 'it''s x'", False),  # doubled quote is an escape, not an end
        ("SELECT a--c\nFROM t", "SELECT a FROM t", True),
        ("SELECT a/**/FROM t", "SELECT a FROM t", True),
        ("SELECT 'open  ", "SELECT 'open ", False),  # unterminated literal runs to the end
    ],
)
def test_execution_key(left: str, right: str, same: bool) -> None:
    assert (execution_key(left) == execution_key(right)) is same


def test_equal_keys_give_equal_results() -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    connection.execute("INSERT INTO t VALUES (1, 'x  y'), (2, '--'), (3, '')")
    variants = [
        "SELECT a FROM t WHERE b = 'x  y'",
        "SELECT a\nFROM t -- note\nWHERE b = 'x  y';",
        "SELECT a /* x */ FROM   t WHERE b = 'x  y' ;",
        "SELECT a FROM t WHERE b = '--'",
        "SELECT a FROM t WHERE b = '--'\n;",
    ]
    by_key: dict[str, set] = {}
    for sql in variants:
        rows = set(connection.execute(sql).fetchall())
        by_key.setdefault(execution_key(sql), set()).add(frozenset(rows))
    assert len(by_key) == 2
    assert all(len(results) == 1 for results in by_key.values())
    connection.close()


def test_random_texts_with_equal_keys_behave_identically() -> None:
    import random

    rng = random.Random(7)
    fragments = ["SELECT", "a", "FROM", "t", "WHERE", "b", "=", "'x  y'", "'--'", "''", '"a"', "[a]", "1"]
    gaps = [" ", "  ", "\n", "\t", " -- c\n", "/* c */", " /* ; */ "]
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    connection.execute("INSERT INTO t VALUES (1, 'x  y'), (2, '--'), (3, '')")

    def outcome(sql: str) -> object:
        try:
            return frozenset(connection.execute(sql).fetchall())
        except Exception as error:
            return f"{type(error).__name__}: {error}"

    base = ["SELECT a FROM t WHERE b = 'x  y'", "SELECT a FROM t WHERE b = '--'", "SELECT [a] FROM t"]
    texts = []
    for _ in range(300):
        words = (
            rng.choice(base).split(" ") if rng.random() < 0.5 else rng.choices(fragments, k=rng.randint(1, 6))
        )
        text = "".join(word + rng.choice(gaps) for word in words)
        texts.append(text + rng.choice(["", ";", " ;", ";;", "; -- end"]))
    by_key: dict[str, set] = {}
    for text in texts:
        by_key.setdefault(execution_key(text), set()).add(outcome(text))
    assert len(by_key) < len(texts)  # keys do merge texts
    assert all(len(outcomes) == 1 for outcomes in by_key.values())
    connection.close()


# -- issue 19 item 3: extraction is linear in the response --------------------------------------

# Hostile responses by repeat count: at n = 1 each is about 4 KB. The old lazy `with ...*? as (` regex
# took 2.7 s on 32 KB of "with " and 8 s on 64 KB (quadratic).
_HOSTILE = {
    "with": lambda n: "with " * (819 * n),
    "with_name": lambda n: "with x " * (585 * n),
    "with_then_select": lambda n: "with x " * (585 * n) + "select 1",
    "fences": lambda n: "```sql\n" * (585 * n),
    "unclosed_fence": lambda n: "```\n" + "select " * (585 * n),
    "json_fields": lambda n: '{"sql": "' * (455 * n),
    "backslashes": lambda n: '"sql": "' + "\\" * (4096 * n),
    "answer_tags": lambda n: "<answer>" * (512 * n),
    "as_paren": lambda n: "with x" + " as (" * (819 * n),
}


def _parse_seconds(text: str) -> float:
    """CPU seconds of this thread: time the scheduler gives other processes is not counted."""
    start = time.thread_time()
    extract_sql(text)
    is_well_formatted(text)
    return time.thread_time() - start


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_extraction_of_hostile_text_grows_linearly(name: str) -> None:
    """64 KB costs about 4x the CPU time of 16 KB (a quadratic parse: 16x): a ratio of two sizes in the same
    run, in this thread's CPU time, best of five each, so neither load nor the machine's speed matters."""
    small, large = _HOSTILE[name](4), _HOSTILE[name](16)
    assert len(large) >= 65000 and len(small) * 4 >= len(large) - 16
    best_small = best_large = float("inf")
    for _ in range(5):
        best_small = min(best_small, _parse_seconds(small))
        best_large = min(best_large, _parse_seconds(large))
    assert best_large / best_small < 10, (
        f"{name}: 16 KB {best_small * 1e3:.2f} ms, 64 KB {best_large * 1e3:.2f} ms"
    )


_OLD_RAW_START = __import__("re").compile(
    r"\b(?:with\s+(?:recursive\s+)?[A-Za-z_`\"\[][^;]*?\bas\s*\(|select\s)", __import__("re").IGNORECASE
)


def test_raw_extraction_matches_the_regex_it_replaced_on_random_text() -> None:
    import random

    from arctic_rl_core.envs.bird import sql_extract

    rng = random.Random(19)
    words = [
        "with",
        "WITH",
        "recursive",
        "x",
        "as",
        "AS",
        "(",
        ")",
        ";",
        "select",
        "SELECT",
        "from",
        "t",
        "\n",
        '"q"',
        "[b]",
        "`c`",
        "xas",
        "with_",
        "selectx",
    ]
    for _ in range(3000):
        text = "".join(
            rng.choice(words) + rng.choice(["", " ", "  ", "\t"]) for _ in range(rng.randint(0, 14))
        )
        expected = _OLD_RAW_START.search(text)
        assert sql_extract._raw_start(text) == (None if expected is None else expected.start()), repr(text)

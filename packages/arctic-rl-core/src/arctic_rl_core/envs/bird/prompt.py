"""The BIRD chat prompts: a system message and a user message, single-turn or multi-turn.

The user message names the engine and carries the schema, the question and the evidence. Single
turn: both messages ask for reasoning in <think>...</think> and the query in <answer>...</answer> as
one ```sql code block, the format that `sql_extract.is_well_formatted` checks. Multi-turn
(`multi_turn`, SkyRL-SQL's protocol): queries to run in <sql>...</sql>, results in <observation>, the
final query in <solution>...</solution>.
"""

from __future__ import annotations

ENGINE = "SQLite"

SYSTEM_PROMPT = (
    "You are a careful data analyst who answers questions about a database by writing one SQL query. "
    "First reason inside <think>...</think>. Then give the final query inside <answer>...</answer> "
    "as a single ```sql code block."
)

OUTPUT_FORMAT = "<think>\nreasoning\n</think>\n<answer>\n```sql\nSELECT ...\n```\n</answer>"


def _question(schema: str, question: str, evidence: str, engine: str) -> str:
    """The engine, the schema, the question and the evidence: what both prompts put first."""
    evidence_text = evidence.strip() if evidence.strip() else "none"
    return (
        f"Database engine: {engine}\n\n"
        f"Database schema:\n{schema}\n\n"
        f"Question: {question.strip()}\n"
        f"Evidence: {evidence_text}\n\n"
    )


def build_user_message(schema: str, question: str, evidence: str, engine: str = ENGINE) -> str:
    return f"{_question(schema, question, evidence, engine)}Answer in this format:\n{OUTPUT_FORMAT}"


def build_messages(schema: str, question: str, evidence: str, engine: str = ENGINE) -> list[dict[str, str]]:
    """Chat messages for one question: [{"role": "system", ...}, {"role": "user", ...}]."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": build_user_message(schema, question, evidence, engine)},
    ]


# -- multi-turn (SkyRL-SQL's protocol, `envs.bird.multi_turn`) --------------------------------------

MULTI_TURN_SYSTEM_PROMPT = (
    "You are a careful data analyst who answers questions about a database with one SQL query. Reason "
    "inside <think>...</think> every turn. To see data, run a query inside <sql>...</sql>: its result "
    "comes back inside <observation>...</observation>. Give the final query inside <solution>...</solution>."
)

MULTI_TURN_FORMAT = (
    "<think>...</think>\n<sql>SELECT ...</sql>\nthen\n<think>...</think>\n<solution>SELECT ...</solution>"
)


def build_multi_turn_user_message(
    schema: str, question: str, evidence: str, max_turns: int, engine: str = ENGINE
) -> str:
    head = _question(schema, question, evidence, engine)
    return f"{head}You have {max_turns} turns. Answer in this format:\n{MULTI_TURN_FORMAT}"


def build_multi_turn_messages(
    schema: str, question: str, evidence: str, max_turns: int, engine: str = ENGINE
) -> list[dict[str, str]]:
    """Chat messages for one question of a multi-turn episode (system + user)."""
    return [
        {"role": "system", "content": MULTI_TURN_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": build_multi_turn_user_message(schema, question, evidence, max_turns, engine),
        },
    ]

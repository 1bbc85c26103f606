"""The BIRD chat prompt: a system message and a user message.

The user message names the engine and carries the schema, the question and the evidence; both
messages ask for reasoning in <think>...</think> and the query in <answer>...</answer> as one
```sql code block, the format that `sql_extract.is_well_formatted` checks.
"""

from __future__ import annotations

ENGINE = "SQLite"

SYSTEM_PROMPT = (
    "You are a careful data analyst who answers questions about a database by writing one SQL query. "
    "First reason inside <think>...</think>. Then give the final query inside <answer>...</answer> "
    "as a single ```sql code block."
)

OUTPUT_FORMAT = "<think>\nreasoning\n</think>\n<answer>\n```sql\nSELECT ...\n```\n</answer>"


def build_user_message(schema: str, question: str, evidence: str, engine: str = ENGINE) -> str:
    evidence_text = evidence.strip() if evidence.strip() else "none"
    return (
        f"Database engine: {engine}\n\n"
        f"Database schema:\n{schema}\n\n"
        f"Question: {question.strip()}\n"
        f"Evidence: {evidence_text}\n\n"
        f"Answer in this format:\n{OUTPUT_FORMAT}"
    )


def build_messages(schema: str, question: str, evidence: str, engine: str = ENGINE) -> list[dict[str, str]]:
    """Chat messages for one question: [{"role": "system", ...}, {"role": "user", ...}]."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": build_user_message(schema, question, evidence, engine)},
    ]

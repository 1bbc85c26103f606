"""GSM8K: the prompt format, the reward, and a small sample of problems written for this project.

Reward: look at the last 300 characters of the response; take the number right after the last
`####` there (an optional `$`, a sign, digits with optional thousands commas and decimals);
remove commas and `$`; the score is 1.0 if that string equals the ground truth exactly, else
0.0. "1,000" therefore matches "1000", but "1000.00" does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_SOURCE = "openai/gsm8k"
ABILITY = "math"
ANSWER_MARKER = "####"
TAIL_CHARS = 300
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SAMPLE_PATH = Path(__file__).with_name("data") / "gsm8k_sample.jsonl"

_NUMBER_AFTER_MARKER = re.compile(r"\s*(\$?\s*-?\$?[0-9][0-9,]*(?:\.[0-9]+)?)")
_FRAMEWORK_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


@dataclass(frozen=True)
class GSM8KProblem:
    question: str
    solution: str  # the worked solution ending in "#### <answer>"

    @property
    def final_answer(self) -> str:
        answer = extract_answer(self.solution)
        if answer is None:
            raise ValueError(f"GSM8K solution has no '#### <number>' ending: {self.solution[-80:]!r}")
        return answer


def extract_answer(solution_str: str) -> str | None:
    """The number after the last `####` in the last 300 characters, commas and `$` removed."""
    tail = solution_str[-TAIL_CHARS:]
    position = tail.rfind(ANSWER_MARKER)
    if position < 0:
        return None
    match = _NUMBER_AFTER_MARKER.match(tail, position + len(ANSWER_MARKER))
    if match is None:
        return None
    return match.group(1).replace(",", "").replace("$", "").replace(" ", "")


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's custom reward signature: {"score": 1.0 or 0.0, "answer_found": bool, "answer": str}."""
    del data_source, extra_info
    unknown = sorted(set(kwargs) - _FRAMEWORK_KWARGS)
    if unknown:
        raise TypeError(f"GSM8K compute_score: unknown keyword argument(s) {unknown}; it takes none")
    if not isinstance(ground_truth, str):
        raise ValueError(
            f"GSM8K compute_score: ground_truth must be the final answer as a string, got {ground_truth!r}"
        )
    answer = extract_answer(solution_str)
    return {
        "score": 1.0 if answer is not None and answer == ground_truth else 0.0,
        "answer_found": answer is not None,
        "answer": answer if answer is not None else "",
    }


def build_messages(question: str) -> list[dict[str, str]]:
    """One user message: the question and the instruction to end with `#### <answer>`."""
    return [{"role": "user", "content": f"{question.strip()} {INSTRUCTION}"}]


def sample_problems() -> list[GSM8KProblem]:
    problems: list[GSM8KProblem] = []
    for line in SAMPLE_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            problems.append(GSM8KProblem(question=entry["question"], solution=entry["answer"]))
    return problems


def build_rows(
    problems: Sequence[GSM8KProblem], split: str, *, env_class: str = "gsm8k_arctic"
) -> list[dict[str, Any]]:
    """Rows in the same layout as the BIRD parquet files (data_source, prompt, ability, ...).

    `env_class` names the SkyRL environment that scores the row: `gsm8k_arctic` is the adapter's
    environment over this module's reward (SkyRL's stock `gsm8k` scores differently); verl ignores it."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": build_messages(problem.question),
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": problem.final_answer},
            "extra_info": {
                "split": split,
                "index": index,
                "question": problem.question,
                "answer": problem.solution,
            },
            "env_class": env_class,
        }
        for index, problem in enumerate(problems)
    ]


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("question", pa.string()),
                        ("answer", pa.string()),
                    ]
                ),
            ),
            ("env_class", pa.string()),
        ]
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path)
    return path

"""GSM8K: answer extraction, the exact-match reward, the prompt and the bundled sample."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from arctic_rl_core.envs import gsm8k


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("So the total is 72.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        ("#### $1,234.50", "1234.50"),
        ("#### $ 40", "40"),
        ("#### -5 degrees", "-5"),
        ("#### 12.", "12"),  # the sentence's full stop is not part of the number
        ("#### 3 and later #### 4", "4"),  # the last marker wins
        ("#### 3 and later ####", None),  # ... even when no number follows it
        ("no marker, 42", None),
        ("#### 7" + " padding" * 50, None),  # the marker is outside the last 300 characters
        ("x" * 1000 + "#### 9", "9"),
    ],
)
def test_extract_answer(response: str, answer: str | None) -> None:
    assert gsm8k.extract_answer(response) == answer


def test_exact_string_match_reward() -> None:
    assert gsm8k.compute_score("openai/gsm8k", "... #### 1,000", "1000") == {
        "score": 1.0,
        "answer_found": True,
        "answer": "1000",
    }
    assert gsm8k.compute_score("openai/gsm8k", "#### 1000.00", "1000")["score"] == 0.0
    assert gsm8k.compute_score("openai/gsm8k", "#### 999", "1000")["score"] == 0.0
    none = gsm8k.compute_score("openai/gsm8k", "I think 1000", "1000")
    assert none == {"score": 0.0, "answer_found": False, "answer": ""}
    with pytest.raises(TypeError, match="unknown keyword"):
        gsm8k.compute_score("openai/gsm8k", "#### 1", "1", method="flexible")
    with pytest.raises(ValueError, match="ground_truth"):
        gsm8k.compute_score("openai/gsm8k", "#### 1", 1)


def test_sample_and_prompt(tmp_path: Path) -> None:
    problems = gsm8k.sample_problems()
    assert len(problems) == 12 and len({p.question for p in problems}) == 12
    assert [p.final_answer for p in problems[:3]] == ["189", "18", "42"]
    assert problems[5].final_answer == "2520"  # written as "$2,520" in the solution
    for problem in problems:  # a response that ends like the reference solution earns 1.0
        assert gsm8k.compute_score(gsm8k.DATA_SOURCE, problem.solution, problem.final_answer)["score"] == 1.0
    messages = gsm8k.build_messages(problems[0].question)
    assert messages == [{"role": "user", "content": problems[0].question + " " + gsm8k.INSTRUCTION}]
    path = gsm8k.write_parquet(gsm8k.build_rows(problems, "train"), tmp_path / "gsm8k.parquet")
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == 12 and rows[1]["reward_model"] == {"style": "rule", "ground_truth": "18"}
    assert rows[1]["data_source"] == "openai/gsm8k" and rows[1]["extra_info"]["index"] == 1


def test_rows_name_the_arctic_gsm8k_environment_unless_told_otherwise():
    problems = gsm8k.sample_problems()[:2]
    assert {row["env_class"] for row in gsm8k.build_rows(problems, "train")} == {"gsm8k_arctic"}
    assert {row["env_class"] for row in gsm8k.build_rows(problems, "test", env_class="gsm8k")} == {"gsm8k"}

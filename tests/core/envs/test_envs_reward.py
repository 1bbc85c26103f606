"""The BIRD reward: tiers, batch deduplication, gold caching, and counted scoring errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird import reward as reward_module
from arctic_rl_core.envs.bird.dataset import load_split
from arctic_rl_core.envs.bird.executor import ExecutorSettings
from arctic_rl_core.envs.bird.reward import (
    BirdScorer,
    ScoreRequest,
    compute_score,
    compute_score_batch,
    score_batch,
)

SETTINGS = ExecutorSettings(num_workers=2, timeout_s=5)


def answer(sql: str) -> str:
    return f"<think>Look at the tables.</think>\n<answer>\n```sql\n{sql}\n```\n</answer>"


@pytest.fixture(scope="module")
def scorer():
    with BirdScorer(SETTINGS) as shared:
        yield shared


@pytest.fixture
def dev(bird_sample: Path):
    split = load_split(bird_sample, "dev")
    return split, {q.question_id: q for q in split.questions}


def request_for(split, question, response: str, **kw) -> ScoreRequest:
    db_path = str(split.databases[question.db_id].db_path)
    return ScoreRequest(solution_str=response, gold_sql=question.sql, db_path=db_path, **kw)


def test_tiers(scorer: BirdScorer, dev) -> None:
    split, by_id = dev
    q = by_id[4]  # titles of 5-star movies by members in Lyon
    equivalent = (
        "SELECT m.title FROM movies m JOIN ratings r ON r.movie_id = m.movie_id "
        "JOIN members p ON p.member_id = r.member_id WHERE p.city = 'Lyon' AND r.stars = 5 ORDER BY m.title"
    )
    cases = [
        (answer(q.sql), 1.0, True, True, True, ""),
        (answer(equivalent), 1.0, True, True, True, ""),  # different SQL, same set of rows
        ("SELECT title FROM movies WHERE genre = 'Drama'", 0.1, False, False, True, "wrong_result"),
        (answer("SELECT title FROM movies WHERE genre = 'Drama'"), 0.1, False, True, True, "wrong_result"),
        (answer("SELECT titel FROM movies"), 0.1, False, True, False, "sql_error"),  # well formatted
        ("SELECT titel FROM movies", 0.0, False, False, False, "sql_error"),
        ("<think>no idea</think> I give up.", 0.0, False, False, False, "no_sql"),
        (answer("DELETE FROM movies"), 0.1, False, True, False, "not_read_only"),
    ]
    result = scorer.score([request_for(split, q, response) for response, *_ in cases])
    for (response, score, correct, formatted, executed, error), verdict in zip(
        cases, result.verdicts, strict=True
    ):
        assert (verdict.score, verdict.correct, verdict.format_correct) == (score, correct, formatted), (
            response
        )
        assert (verdict.execution_success, verdict.error, verdict.scoring_error) == (executed, error, ""), (
            response
        )
    assert result.error_counts == {"wrong_result": 2, "sql_error": 2, "no_sql": 1, "not_read_only": 1}
    assert result.scoring_error_counts == {}


def test_alternative_answers_count_as_correct(scorer: BirdScorer, dev) -> None:
    split, by_id = dev
    q = by_id[0]  # movies released in 2018 -> 2
    response = answer("SELECT title FROM movies WHERE release_year = 2018")
    plain = scorer.score([request_for(split, q, response)]).verdicts[0]
    alternative = "SELECT title FROM movies WHERE release_year = 2018"
    with_alt = scorer.score([request_for(split, q, response, alternative_answers=(alternative,))]).verdicts[0]
    assert plain.score == 0.1 and not plain.correct
    assert with_alt.score == 1.0 and with_alt.correct


def test_batch_executes_each_distinct_query_once_and_caches_gold(bird_sample: Path) -> None:
    split = load_split(bird_sample, "dev")
    questions = split.questions[:4]
    requests = []
    for q in questions:
        for response in (
            answer(q.sql),
            answer(q.sql + ";"),  # same execution key
            answer("  " + q.sql.replace(" FROM ", "\nFROM ") + "  -- done"),  # same execution key
            answer("SELECT 1"),
            answer("SELECT 1"),
            "no sql here",
        ):
            requests.append(request_for(split, q, response))
    with BirdScorer(SETTINGS) as fresh:
        first = fresh.score(requests)
        second = fresh.score(requests)
    # Distinct executions: 4 golds (the first three responses share the gold's key) + "SELECT 1" once.
    assert first.gold_executed == 4 and first.gold_cache_hits == 0
    assert first.predicted_executed == 1
    assert second.gold_executed == 0 and second.gold_cache_hits == 4
    assert second.verdicts == first.verdicts
    assert [v.score for v in first.verdicts[:6]] == [1.0, 1.0, 1.0, 0.1, 0.1, 0.0]


def test_batch_verdicts_equal_one_by_one_verdicts(scorer: BirdScorer, dev) -> None:
    split, by_id = dev
    responses = [answer(by_id[i].sql) for i in range(10)] + [
        answer(by_id[(i + 1) % 10].sql) for i in range(10)
    ]
    requests = [request_for(split, by_id[i % 10], r) for i, r in enumerate(responses)]
    together = scorer.score(requests).verdicts
    one_by_one = [scorer.score([r]).verdicts[0] for r in requests]
    assert together == one_by_one
    assert sum(v.correct for v in together) >= 10


def test_scoring_errors_are_named_and_counted(scorer: BirdScorer, dev, tmp_path: Path) -> None:
    split, by_id = dev
    q = by_id[1]
    db_path = str(split.databases[q.db_id].db_path)
    requests = [
        ScoreRequest(answer("SELECT 1"), "SELECT no_such_column FROM movies", db_path),
        ScoreRequest("nothing", "SELECT no_such_column FROM movies", db_path),
        ScoreRequest(answer("SELECT 1"), "SELECT 1", str(tmp_path / "missing.sqlite")),
        ScoreRequest(answer(q.sql), q.sql, db_path),
    ]
    result = scorer.score(requests)
    kinds = [(v.score, v.error, v.scoring_error) for v in result.verdicts]
    assert kinds == [
        (0.1, "", "gold_sql_error"),  # executes, cannot be judged: named, and never 1.0
        (0.0, "no_sql", "gold_sql_error"),
        (0.1, "database_missing", "database_missing"),  # well formatted, but nothing ran
        (1.0, "", ""),
    ]
    assert result.scoring_error_counts == {"gold_sql_error": 2, "database_missing": 1}


def test_internal_exception_is_counted_not_silent(
    scorer: BirdScorer, dev, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    split, by_id = dev

    def broken_judge(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(reward_module, "judge", broken_judge)
    result = scorer.score([request_for(split, by_id[0], answer(by_id[0].sql))] * 3)
    assert [v.scoring_error for v in result.verdicts] == ["internal_KeyError"] * 3
    assert result.scoring_error_counts == {"internal_KeyError": 3}
    assert "could not be judged" in caplog.text


def test_compute_score_verl_signature(dev) -> None:
    split, by_id = dev
    q = by_id[3]
    extra = {"db_path": str(split.databases[q.db_id].db_path), "num_turns": 1, "rollout_reward_scores": {}}
    verdict = compute_score("bird", answer(q.sql), q.sql, extra, timeout_s=5.0, num_workers=1)
    assert verdict == {
        "score": 1.0,
        "correct": True,
        "format_correct": True,
        "execution_success": True,
        "error": "",
        "scoring_error": "",
    }
    batch = compute_score_batch(
        ["bird"] * 2, [answer(q.sql), "none"], [q.sql] * 2, [extra] * 2, num_workers=1
    )
    assert [v["score"] for v in batch] == [1.0, 0.0]
    assert json.dumps(batch)  # plain values only (verl logs them)


def test_compute_score_rejects_bad_input(dev) -> None:
    split, by_id = dev
    q = by_id[3]
    extra = {"db_path": str(split.databases[q.db_id].db_path)}
    with pytest.raises(TypeError, match="unknown keyword"):
        compute_score("bird", "x", q.sql, extra, timeout=5)
    with pytest.raises(ValueError, match="db_path"):
        compute_score("bird", "x", q.sql, {"db_id": "movie_club"})
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("bird", "x", ["SELECT 1"], extra)


def test_score_batch_uses_the_shared_scorer(dev) -> None:
    split, by_id = dev
    result = score_batch([request_for(split, by_id[8], answer(by_id[8].sql))])
    assert result.scores == [1.0]


def test_extraction_failure_stays_with_its_rollout(
    scorer: BirdScorer, dev, monkeypatch: pytest.MonkeyPatch
) -> None:
    split, by_id = dev
    real_extract = reward_module.extract_sql

    def extract(response: str):
        if "poison" in response:
            raise UnicodeError("poison")
        return real_extract(response)

    monkeypatch.setattr(reward_module, "extract_sql", extract)
    q = by_id[2]
    result = scorer.score([request_for(split, q, answer(q.sql)), request_for(split, q, "poison")])
    assert [v.score for v in result.verdicts] == [1.0, 0.0]
    assert result.verdicts[1].scoring_error == "internal_UnicodeError"
    assert result.scoring_error_counts == {"internal_UnicodeError": 1}


def test_identical_responses_are_parsed_and_format_checked_once_per_batch(
    scorer: BirdScorer, dev, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 19 item 3: 4 identical 32 KB responses were extracted 4 times (21 s with the old regex)
    split, by_id = dev
    calls: list[str] = []
    real_extract, real_format = reward_module.extract_sql, reward_module.is_well_formatted

    def extract(response: str):
        calls.append("extract")
        return real_extract(response)

    def formatted(response: str) -> bool:
        calls.append("format")
        return real_format(response)

    monkeypatch.setattr(reward_module, "extract_sql", extract)
    monkeypatch.setattr(reward_module, "is_well_formatted", formatted)
    q = by_id[2]
    long_response = "with " * 6400 + answer(q.sql)
    result = scorer.score([request_for(split, q, long_response) for _ in range(4)])
    assert [v.score for v in result.verdicts] == [1.0] * 4
    assert sorted(calls) == ["extract", "format"]

"""BIRD multi-turn (`envs.bird.multi_turn`, SkyRL-SQL's protocol) on the bundled sample: queries run
read-only and come back as bounded observations with the turns left; the episode ends at a
<solution> or after max_turns actions; the reward is the final answer's execution match (1 / 0),
-1 for a malformed transcript."""

from __future__ import annotations

import sqlite3

import pytest
from arctic_rl_core.envs.bird.multi_turn import (
    INVALID_ACTION,
    MAX_OBSERVATION_ROWS,
    BirdSQLEpisode,
    database_of,
    final_solution,
    render_rows,
)

GOLD = "SELECT COUNT(movie_id) FROM movies WHERE release_year = 2018"


def episode(dev_db, max_turns: int = 3) -> BirdSQLEpisode:
    return BirdSQLEpisode(gold_sql=GOLD, db_path=str(dev_db), max_turns=max_turns)


def count_2018(dev_db) -> int:
    with sqlite3.connect(dev_db) as connection:
        return connection.execute(GOLD).fetchone()[0]


def test_a_query_then_the_right_solution_scores_one(dev_db):
    ep = episode(dev_db)
    first = ep.step(
        "<think>count them</think>\n<sql>SELECT COUNT(*) FROM movies WHERE release_year = 2018</sql>"
    )
    assert not first.done and first.reward == 0.0
    assert first.observation.startswith("\n\n<observation>") and first.observation.endswith(
        "</observation>\n\n"
    )
    assert f"\n{count_2018(dev_db)}\n" in first.observation  # the result table: header "0", then the count
    assert "<reminder>You have 2 turns left to complete the task.</reminder>" in first.observation
    last = ep.step(f"<think>that is it</think>\n<solution>{GOLD}</solution>")
    assert (last.done, last.reward, last.observation) == (True, 1.0, None)
    assert ep.metrics() == {"turns": 2.0, "sql_calls": 1.0, "well_formed": 1.0, "correct": 1.0}


def test_a_wrong_or_failing_solution_scores_zero_and_a_malformed_one_minus_one(dev_db):
    wrong = episode(dev_db).step("<think>x</think><solution>SELECT COUNT(*) FROM movies</solution>")
    failing = episode(dev_db).step("<think>x</think><solution>SELECT nope FROM nowhere</solution>")
    no_thought = episode(dev_db).step(f"<solution>{GOLD}</solution>")
    assert (wrong.done, wrong.reward) == (True, 0.0)
    assert failing.reward == 0.0
    assert no_thought.reward == -1.0


def test_the_turn_limit_ends_the_episode_without_an_observation(dev_db):
    ep = episode(dev_db, max_turns=2)
    assert ep.step("<think>a</think><sql>SELECT 1</sql>").done is False
    last = ep.step("<think>b</think><sql>SELECT 2</sql>")  # the last allowed action: no answer given
    assert (last.done, last.observation, last.reward) == (True, None, -1.0)
    assert ep.metrics()["turns"] == 2.0 and ep.metrics()["sql_calls"] == 1.0
    with pytest.raises(RuntimeError, match="ended"):
        ep.step("more")


def test_an_action_without_sql_gets_the_invalid_action_observation(dev_db):
    step = episode(dev_db).step("I will just think")
    assert INVALID_ACTION in step.observation and not step.done


def test_queries_are_read_only_and_errors_come_back_as_observations(dev_db):
    ep = episode(dev_db, max_turns=5)
    write = ep.step("<think>a</think><sql>DELETE FROM movies</sql>")
    assert write.observation.startswith("\n\n<observation>Error executing SQL:")
    missing = ep.step("<think>b</think><sql>SELECT * FROM no_such_table</sql>")
    assert "no such table" in missing.observation
    assert count_2018(dev_db) > 0  # nothing was deleted


def test_a_long_result_is_cut_to_fifty_rows_and_says_so():
    rows = [(i, "x" * 200) for i in range(100)]
    text = render_rows(rows)
    assert text.startswith(f"Truncated to {MAX_OBSERVATION_ROWS} lines")
    assert len(text.splitlines()) == MAX_OBSERVATION_ROWS + 1  # the header, then 50 rows
    assert render_rows([(2, None), (1, "b")]).splitlines() == ["0    1", "1    b", "2 None"]


def test_the_final_solution_follows_skyrl_sqls_format_rules():
    obs = "\n\n<observation>1\n<reminder>r</reminder></observation>\n\n"
    assert (
        final_solution(
            "<think>a</think><sql>SELECT 1</sql>" + obs + "<think>b</think><solution> S </solution>"
        )
        == "S"
    )
    assert (
        final_solution("<think>a</think><sql>SELECT 1</sql>" + obs + "no thought<solution>S</solution>")
        is None
    )
    assert final_solution("<think>a</think><solution>S<sql>x</sql></solution>") is None
    assert final_solution("<think>a</think><solution>S</solution><solution>T</solution>") is None
    assert final_solution("<think>a</think><solution>S") is None


def test_rows_name_their_database_either_way(dev_db, tmp_path):
    assert database_of({"extra_info": {"db_path": str(dev_db)}}) == str(dev_db)
    skyrl_sql = {"db_id": "movie_club", "data": "bird"}
    expected = tmp_path / "bird" / "train" / "train_databases" / "movie_club" / "movie_club.sqlite"
    assert database_of(skyrl_sql, {"db_path": str(tmp_path)}) == str(expected)
    with pytest.raises(ValueError, match="names no database"):
        database_of({"db_id": "movie_club"})
    row = {"reward_model": {"ground_truth": GOLD}, "extra_info": {"db_path": str(dev_db)}, "max_turns": 4}
    assert BirdSQLEpisode.from_row(row).max_turns == 4
    with pytest.raises(ValueError, match="ground_truth"):
        BirdSQLEpisode.from_row({"extra_info": {"db_path": str(dev_db)}})


def test_preprocess_with_max_turns_writes_multi_turn_prompts(bird_sample):
    from arctic_rl_core.envs.bird.dataset import load_split
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, build_rows
    from arctic_rl_core.envs.bird.schema_prompt import SchemaPromptCache

    split = load_split(bird_sample, "dev")
    options = PreprocessOptions(max_turns=4)
    rows, _ = build_rows(split, SchemaPromptCache(options.schema_prompt), options)
    assert {row["env_class"] for row in rows} == {"bird_multi_turn"}
    system, user = rows[0]["prompt"]
    assert "<sql>" in system["content"] and "<solution>" in system["content"]
    assert "You have 4 turns." in user["content"]
    single, _ = build_rows(split, SchemaPromptCache(options.schema_prompt), PreprocessOptions())
    assert {row["env_class"] for row in single} == {"bird"} and "<answer>" in single[0]["prompt"][0][
        "content"
    ]

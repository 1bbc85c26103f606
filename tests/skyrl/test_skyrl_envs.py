"""skyrl-gym environments over the core rewards, on the bundled BIRD sample (real SQL execution)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import skyrl_gym
from adapter_skyrl.envs import BIRD_ENV_IDS, register_environments


def _answer(sql: str) -> str:
    return f"<think>count them</think>\n<answer>\n```sql\n{sql}\n```\n</answer>"


def test_bird_env_scores_by_executing_sql(bird_train_rows):
    row = bird_train_rows[0]
    gold = row["reward_model"]["ground_truth"]
    for env_id in BIRD_ENV_IDS:
        env = skyrl_gym.make(env_id, env_config={}, extras=row)
        out = env.step(_answer(gold))
        assert (out["reward"], out["done"], out["metadata"]["execution_success"]) == (1.0, True, True)
    wrong = skyrl_gym.make("bird", env_config={}, extras=row).step(_answer("SELECT 123456789"))
    assert wrong["reward"] == 0.1 and wrong["metadata"]["execution_success"] is True  # runs, differs
    garbage = skyrl_gym.make("bird", env_config={}, extras=row).step("no sql here")
    assert garbage["reward"] == 0.0 and "scoring_error" not in garbage["metadata"]


def test_scoring_failure_is_reported_not_a_silent_zero(bird_train_rows):
    row = dict(bird_train_rows[0], extra_info={"db_id": "school_district"})  # no db_path
    out = skyrl_gym.make("bird", env_config={}, extras=row).step(_answer("SELECT 1"))
    assert out["reward"] == 0.0
    assert "db_path" in out["metadata"]["scoring_error"]


def test_arctic_envs_report_their_verdict_as_metrics(bird_train_rows):
    """SkyRL's generator reads `env.get_metrics()`: the verdict as numbers (what the generator counts
    as `generate/scoring_errors` and `generate/execution_success_rate`)."""
    row = bird_train_rows[0]
    env = skyrl_gym.make("bird", env_config={}, extras=row)
    env.step(_answer(row["reward_model"]["ground_truth"]))
    assert env.get_metrics() == {
        "scoring_error": 0.0,
        "correct": 1.0,
        "format_correct": 1.0,
        "execution_success": 1.0,
    }
    broken = skyrl_gym.make("bird", env_config={}, extras=dict(row, extra_info={}))
    broken.step(_answer("SELECT 1"))
    assert broken.get_metrics()["scoring_error"] == 1.0


def test_registration_is_idempotent_and_happens_in_a_fresh_process_on_unpickling():
    register_environments()
    register_environments()  # duplicates would raise inside skyrl-gym
    from adapter_skyrl.generator import ArcticGenerator

    blob = pickle.dumps(ArcticGenerator)  # what a Ray worker receives with the generator
    code = (
        "import pickle, sys\n"
        "from skyrl_gym.envs.registration import registry\n"
        "assert 'bird' not in registry\n"
        "pickle.loads(sys.stdin.buffer.read())\n"
        "print(sorted(k for k in registry if k in ('bird', 'bird_sql', 'gsm8k_arctic', 'bird_multi_turn')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True).stdout
    assert out.decode().strip().splitlines()[-1] == "['bird', 'bird_multi_turn', 'bird_sql', 'gsm8k_arctic']"


def test_gsm8k_arctic_env_uses_the_core_reward():
    from arctic_rl_core.envs.gsm8k import build_rows, sample_problems

    row = build_rows(sample_problems()[:1], "train")[0]
    answer = row["reward_model"]["ground_truth"]
    env = skyrl_gym.make("gsm8k_arctic", env_config={}, extras=row)
    right = env.step(f"so the total is\n#### {answer}")
    assert right["reward"] == 1.0 and right["metadata"]["answer"] == answer
    wrong = skyrl_gym.make("gsm8k_arctic", env_config={}, extras=row).step(f"#### {answer}1")
    assert wrong["reward"] == 0.0 and wrong["metadata"]["answer_found"] is True

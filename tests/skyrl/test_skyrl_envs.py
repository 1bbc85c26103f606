"""skyrl-gym environments over the core rewards, on the bundled BIRD sample (real SQL execution)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import skyrl_gym
from adapter_skyrl.envs import BIRD_ENV_IDS, register_environments
from adapter_skyrl.generator import score_rollouts


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


def test_batch_scoring_matches_per_row_env_scoring(bird_train_rows):
    rows = bird_train_rows[:4]
    texts = [
        _answer(rows[0]["reward_model"]["ground_truth"]),
        _answer("SELECT 1"),
        "nothing",
        _answer("SELEC x"),
    ]
    broken = dict(rows[3], extra_info={})  # this row cannot be scored: the batch falls back per row
    rewards, verdicts = score_rollouts(texts, [r["prompt"] for r in rows], ["bird"] * 4, [*rows[:3], broken])
    assert rewards == [1.0, 0.1, 0.0, 0.0]
    assert [bool(v.get("scoring_error")) for v in verdicts] == [False, False, False, True]
    rewards_ok, _ = score_rollouts(texts[:3], [r["prompt"] for r in rows[:3]], ["bird_sql"] * 3, rows[:3])
    assert rewards_ok == rewards[:3]


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
        "print(sorted(k for k in registry if k in ('bird', 'bird_sql', 'gsm8k_arctic')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True).stdout
    assert out.decode().strip().splitlines()[-1] == "['bird', 'bird_sql', 'gsm8k_arctic']"


def test_gsm8k_arctic_env_uses_the_core_reward():
    from arctic_rl_core.envs.gsm8k import build_rows, sample_problems

    row = build_rows(sample_problems()[:1], "train")[0]
    answer = row["reward_model"]["ground_truth"]
    env = skyrl_gym.make("gsm8k_arctic", env_config={}, extras=row)
    right = env.step(f"so the total is\n#### {answer}")
    assert right["reward"] == 1.0 and right["metadata"]["answer"] == answer
    wrong = skyrl_gym.make("gsm8k_arctic", env_config={}, extras=row).step(f"#### {answer}1")
    assert wrong["reward"] == 0.0 and wrong["metadata"]["answer_found"] is True
    rewards, _ = score_rollouts([f"#### {answer}"], [row["prompt"]], ["gsm8k_arctic"], [row])
    assert rewards == [1.0]


class EchoEnv:  # replaced below by a BaseTextEnv subclass (skyrl_gym imported lazily)
    pass


def test_environment_skyrl_gym_sections_reach_the_environments():
    from adapter_skyrl.config import parse_cli
    from adapter_skyrl.generator import env_config_for
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class _Echo(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.value = float(env_config["reward"])

        def step(self, action):
            return BaseTextEnvStepOutput(observations=[], reward=self.value, done=True, metadata={})

    global EchoEnv
    EchoEnv = _Echo
    _Echo.__module__, _Echo.__qualname__, _Echo.__name__ = __name__, "EchoEnv", "EchoEnv"
    if "arctic_echo_test" not in registry:
        register(id="arctic_echo_test", entry_point=f"{__name__}:EchoEnv")
    # SkyRL's own section of an env class is what that environment gets (SkyRLGymGenerator's rule)
    cfg = parse_cli(["environment.skyrl_gym.text2sql.db_path=/db"])
    assert env_config_for(cfg.environment.skyrl_gym, "text2sql").db_path == "/db"
    conv = [[{"role": "user", "content": "q"}]]
    rewards, _ = score_rollouts(
        ["x"], conv, ["arctic_echo_test"], [{}], env_configs={"arctic_echo_test": {"reward": 0.25}}
    )
    assert rewards == [0.25]


@pytest.mark.parametrize("max_turns", [1, 5])
def test_every_environment_gets_generator_max_turns_in_its_extras_as_skyrl_gives_it(max_turns):
    """SkyRL's generator sets `env_extras["max_turns"] = generator.max_turns` before it builds each
    environment; gsm8k_multi_turn (SkyRL's turn_level_rewards example) sizes its format reward by it,
    over the data's own `extra_info.max_turns`. A well-formatted wrong answer there: 0.2 / max_turns."""
    row = {"reward_spec": {"ground_truth": "72"}, "extra_info": {"max_turns": 5}}
    conv = [[{"role": "user", "content": "How many?"}]]
    wrong = "Working it out.\n#### 71"
    rewards, _ = score_rollouts([wrong], conv, ["gsm8k_multi_turn"], [row], max_turns=max_turns)
    # the environment exactly as SkyRLGymGenerator builds it (its extras: the row's plus max_turns)
    env = skyrl_gym.make("gsm8k_multi_turn", env_config={}, extras={**row, "max_turns": max_turns})
    env.init(conv[0])
    assert rewards == [env.step(wrong)["reward"]] == [pytest.approx(0.2 / max_turns)]

"""Multi-turn SkyRL through SkyRL's own generator on the reference engine (in process): multi-turn
GSM8K (SkyRL's `gsm8k_multi_turn`, turn-level rewards) and SkyRL-SQL-style BIRD (the Arctic
`bird_multi_turn` and SkyRL's own `text2sql`). Each trajectory's row is checked against the turns the
sampler drew (ids where it drew them, loss mask 1 exactly there, its log-probs), and equals what
SkyRL's generator makes of the same turns on a vLLM-free engine (`skyrl_multi_turn.skyrl_replay`):
prompt and response ids, per-token rewards, loss masks, stop reasons, log-probs. Scripted policies
give a trajectory that answers early, one that runs to `max_turns`, one whose environment raises, and
text prompts (the on-prem server) whose later turns were read as other ids than the row holds."""

from __future__ import annotations

import asyncio
import re

import pytest
from adapter_skyrl.config import parse_cli
from adapter_skyrl.generator import WEIGHTS_VERSION_KEY, ArcticGenerator
from adapter_skyrl.inference_client import ArcticInferenceClient
from arctic_rl_core.dispatch import run
from skyrl_multi_turn import (
    SQL_STOP,
    ScriptedPolicy,
    TextOnly,
    bird_multi_turn_rows,
    generator_input,
    gsm8k_multi_turn_rows,
    row_without_replay_fields,
    skyrl_replay,
    skyrl_sql_layout,
    text2sql_rows,
)

TINY = dict(num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1)
SQL_SETTINGS = [  # SkyRL-SQL's generator settings (examples/train/text_to_sql/run_skyrl_sql.sh)
    "generator.use_conversation_multi_turn=false",
    f"generator.sampling_params.stop={SQL_STOP}",
    "generator.max_turns=3",
    "trainer.max_prompt_length=1024",  # the bundled BIRD prompts: ~600 tokens
    "generator.max_input_length=1536",
]


@pytest.fixture(scope="module")
def engine():
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    backend = ReferenceBackend(ReferenceEngineSettings(model=TINY, seed=5, colocated=False, num_threads=1))
    run(backend.sync_weights())
    run(backend.reset_prefix_cache())
    yield backend
    run(backend.shutdown())


def make_generator(backend, tokenizer, overrides):
    cfg = parse_cli(["generator.sampling_params.max_generate_length=64", *overrides])
    client = ArcticInferenceClient(backend, tokenizer, model_name="tiny")
    return cfg, ArcticGenerator(cfg.generator, cfg.environment.skyrl_gym, client, tokenizer)


def generate(backend, tokenizer, rows, overrides, n=1):
    cfg, gen = make_generator(backend, tokenizer, overrides)
    batch = generator_input(rows, cfg, n)
    return cfg, gen, batch, asyncio.run(gen.generate(batch))


def check_rows_against_turns(gen, out):
    """Every row: its sampled tokens at the places SkyRL's bookkeeping puts them, loss mask 1 exactly on
    them (a turn's final EOS dropped when the next turn continues the message), the sampler's
    log-probs there and 0.0 on observation tokens; the row's prompt is the first turn's context."""
    eos = gen.tokenizer.eos_token_id
    for i, report in enumerate(gen.last_call.trajectories):
        prompt, response = out["prompt_token_ids"][i], out["response_ids"][i]
        mask, logprobs = out["loss_masks"][i], out["rollout_logprobs"][i]
        assert tuple(prompt) == report.turns[0].context_ids
        expected_mask = [0] * len(response)
        for turn in report.turns:
            start = len(turn.prompt_ids) - len(report.turns[0].prompt_ids)
            kept = list(turn.token_ids)
            if response[start : start + len(kept)] != kept:  # continued message: the EOS is dropped
                assert kept[-1] == eos and response[start : start + len(kept) - 1] == kept[:-1]
                kept = kept[:-1]
            for j, lp in enumerate(turn.logprobs[: len(kept)]):
                expected_mask[start + j] = 1
                assert logprobs[start + j] == pytest.approx(lp, abs=0)
        # SkyRL's own addition: an EOS after a stop string or at the end of a non-conversation row
        extra = [k for k, (m, e) in enumerate(zip(mask, expected_mask, strict=True)) if m != e]
        assert all(response[k] == eos for k in extra), (i, extra)
        assert all(logprobs[k] == 0.0 for k, m in enumerate(expected_mask) if not m and k not in extra)


def test_multi_turn_gsm8k_rows_are_the_sampled_turns_and_match_skyrls_generator(engine):
    """The tiny random model rarely answers right: most trajectories run to max_turns=3, each turn an
    assistant message followed by SkyRL's observation message (chat-templated, loss mask 0)."""
    rows = gsm8k_multi_turn_rows(3)
    cfg, gen, batch, out = generate(engine, engine.tokenizer, rows, ["generator.max_turns=3"], n=2)
    turns = [len(r.turns) for r in gen.last_call.trajectories]
    assert len(turns) == 6 and max(turns) == 3 and min(turns) >= 1
    check_rows_against_turns(gen, out)
    skyrl = skyrl_replay(cfg, engine.tokenizer, batch, gen.last_call.trajectories)
    assert row_without_replay_fields(out) == row_without_replay_fields(skyrl)
    # turn-level rewards: one per turn, at the turn's last sampled token
    for reward, report in zip(out["rewards"], gen.last_call.trajectories, strict=True):
        assert sum(1 for r in reward if r != 0) <= len(report.turns)
    metrics = out["rollout_metrics"]
    assert metrics["generate/turns_mean"] == sum(turns) / 6 and metrics["generate/turns_max"] == 3
    assert metrics["token_drift/turns"] == 0.0 and metrics["generate/env_errors"] == 0
    assert out[WEIGHTS_VERSION_KEY] == [run(engine.state()).weights_version] * 6


def sql_script(gold_by_question: dict[str, str], plan: dict[str, str]):
    """Per question (found in the conversation), one of: "query-then-answer", "answer", "never"."""

    def script(conversation: str) -> str:
        question = next(q for q in gold_by_question if q in conversation)
        asked = conversation.count("<reminder>")  # observations so far (the prompt names the tags too)
        mode = plan[question]
        if mode == "answer" or (mode == "query-then-answer" and asked >= 1):
            return f"<think>done</think>\n<solution>{gold_by_question[question]}</solution>"
        return f"<think>look {asked}</think>\n<sql>SELECT COUNT(*) FROM schools</sql>"

    return script


def scripted_sql_rows():
    rows = bird_multi_turn_rows(max_turns=3)[:3]
    questions = {r["extra_info"]["question"]: r["reward_model"]["ground_truth"] for r in rows}
    plan = dict(zip(questions, ["query-then-answer", "answer", "never"], strict=True))
    return rows, sql_script(questions, plan)


@pytest.mark.parametrize("env", ["bird_multi_turn", "text2sql"])
def test_sql_episodes_end_early_or_at_max_turns_with_skyrl_sqls_rewards(engine, env, tmp_path):
    """SkyRL-SQL's settings (no chat turns, stop at </sql> / </solution>): a query then the right answer
    (2 turns, reward 1), the answer at once (1 turn: ends early), never an answer (3 turns = max_turns:
    reward -1). The Arctic env and SkyRL's own `text2sql` agree; each equals SkyRL's generator's replay."""
    rows, script = scripted_sql_rows()
    overrides = list(SQL_SETTINGS)
    if env == "text2sql":
        rows = text2sql_rows(rows)
        overrides.append(f"environment.skyrl_gym.text2sql.db_path={skyrl_sql_layout(tmp_path)}")
    policy = ScriptedPolicy(engine, script)
    cfg, gen, batch, out = generate(policy, engine.tokenizer, rows, overrides)
    assert [len(r.turns) for r in gen.last_call.trajectories] == [2, 1, 3]
    assert [sum(r) for r in out["rewards"]] == [1.0, 1.0, -1.0]
    check_rows_against_turns(gen, out)
    texts = [engine.tokenizer.decode(ids) for ids in out["response_ids"]]
    assert texts[0].count("<reminder>") == 1 and "1 turns left" not in texts[0]
    assert "<reminder>You have 2 turns left to complete the task.</reminder>" in texts[0]
    assert texts[2].count("<reminder>") == 2  # the last action gets none
    skyrl = skyrl_replay(cfg, engine.tokenizer, batch, gen.last_call.trajectories)
    assert row_without_replay_fields(out) == row_without_replay_fields(skyrl)


def test_an_environment_that_raises_costs_its_row_not_the_batch(engine, caplog):
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class Flaky(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.fail_at = int((extras or {}).get("fail_at", 0))

        def step(self, action):
            self.turns += 1
            if self.turns == self.fail_at:
                raise ValueError(f"broken tool at turn {self.turns}")
            done = self.turns >= 2
            observations = [] if done else [{"role": "user", "content": "go on"}]
            return BaseTextEnvStepOutput(observations=observations, reward=0.5, done=done, metadata={})

    if "arctic_flaky_test" not in registry:
        register(id="arctic_flaky_test", entry_point=Flaky)
    prompt = [{"role": "user", "content": "say something"}]
    rows = [{"prompt": prompt, "env_class": "arctic_flaky_test", "fail_at": f} for f in (0, 2, 0)]
    _, gen, _, out = generate(engine, engine.tokenizer, rows, ["generator.max_turns=2"])
    assert len(out["response_ids"]) == 3  # the batch is whole
    failed = gen.last_call.trajectories[1]
    assert "Flaky.step raised ValueError: broken tool at turn 2" in failed.failure
    assert out["loss_masks"][1] == [0] and sum(out["rewards"][1]) == 0.0 and out["stop_reasons"][1] == "abort"
    assert out["prompt_token_ids"][1] == list(failed.turns[0].context_ids)
    assert [sum(r) for i, r in enumerate(out["rewards"]) if i != 1] == [1.0, 1.0]  # 0.5 per turn, 2 turns
    assert out["rollout_metrics"]["generate/env_errors"] == 1.0
    assert "kept as a masked row" in caplog.text or failed.failure  # logged through loguru
    every = [dict(r, fail_at=1) for r in rows]
    with pytest.raises(RuntimeError, match="every trajectory of the batch failed in its environment"):
        generate(engine, engine.tokenizer, every, ["generator.max_turns=2"])


def test_text_prompts_mask_the_turns_the_server_read_as_other_ids(engine):
    """To a text-only server: a response spelt with ids the tokenizer never makes of its text is read
    back merged in the next turn's context. That turn (and every later one) was sampled from other ids
    than the row holds: its tokens get loss mask 0; the first turn, read exactly, keeps its mask."""
    rows, script = scripted_sql_rows()
    policy = ScriptedPolicy(engine, script, spell="SELECT")
    *_, exact = generate(policy, engine.tokenizer, rows, SQL_SETTINGS)
    _, gen, _, out = generate(TextOnly(policy), engine.tokenizer, rows, SQL_SETTINGS)
    assert exact["rollout_metrics"]["token_drift/turns"] == 0.0  # ids in: nothing drifts
    assert out["response_ids"] == exact["response_ids"] and out["rewards"] == exact["rewards"]
    for i, report in enumerate(gen.last_call.trajectories):
        assert [t.exact for t in report.turns][:1] == [True]
        if len(report.turns) == 1:
            assert out["loss_masks"][i] == exact["loss_masks"][i]
            continue
        assert not report.turns[1].exact and report.drifted_turns == len(report.turns) - 1
        second = len(report.turns[1].prompt_ids) - len(report.turns[0].prompt_ids)
        assert out["loss_masks"][i][:second] == exact["loss_masks"][i][:second]
        assert set(out["loss_masks"][i][second:]) == {0} and 1 in exact["loss_masks"][i][second:]
    drifted = sum(r.drifted_turns for r in gen.last_call.trajectories)
    assert out["rollout_metrics"]["token_drift/turns"] == drifted / 6 == 3 / 6


def test_step_wise_rows_are_one_turn_each_with_the_context_the_sampler_read(engine):
    rows, script = scripted_sql_rows()
    overrides = [
        *(o for o in SQL_SETTINGS if "use_conversation_multi_turn" not in o),  # step-wise: chat turns
        "generator.step_wise_trajectories=true",
    ]
    cfg, gen, batch, out = generate(ScriptedPolicy(engine, script), engine.tokenizer, rows, overrides)
    turns = [t for report in gen.last_call.trajectories for t in report.turns]
    assert len(out["response_ids"]) == len(turns) == 6
    for prompt, response, mask, turn in zip(
        out["prompt_token_ids"], out["response_ids"], out["loss_masks"], turns, strict=True
    ):
        assert tuple(prompt) == turn.context_ids and tuple(response[: len(turn.token_ids)]) == turn.token_ids
        assert mask[: len(turn.token_ids)] == [1] * len(turn.token_ids) and not any(
            mask[len(turn.token_ids) + 1 :]
        )
    assert out["is_last_step"] == [False, True, True, False, False, True]
    assert len(out[WEIGHTS_VERSION_KEY]) == 6
    skyrl = skyrl_replay(cfg, engine.tokenizer, batch, gen.last_call.trajectories)
    assert row_without_replay_fields(out) == row_without_replay_fields(skyrl)
    assert re.search("<solution>", engine.tokenizer.decode(out["response_ids"][1]))


def test_multi_turn_settings_at_dry_run():
    """Multi-turn SkyRL settings are SkyRL's generator's (honoured); what SkyRL would silently ignore is
    refused; the response bound covers every turn; on-prem text prompts are said aloud."""
    from adapter_skyrl.config import translate

    def run(*overrides):
        return translate(
            parse_cli(["trainer.arctic_rl.backend.kind=reference", *overrides]), steps_per_epoch=4
        )

    multi = run(*SQL_SETTINGS, "generator.sampling_params.max_generate_length=64")
    assert not multi.issues
    assert multi.arctic.batch.max_prompt_length == 1024
    assert multi.arctic.batch.max_response_length == 1536 + 64  # max_input_length + max_generate_length
    step_wise = run(
        *SQL_SETTINGS[1:],
        "generator.step_wise_trajectories=true",
        "generator.sampling_params.max_generate_length=64",
    )
    assert step_wise.arctic.batch.max_prompt_length == 1536  # a step's prompt: the conversation so far
    single = run("generator.sampling_params.max_generate_length=64")
    assert single.arctic.batch.max_response_length == 64
    stop = run("generator.sampling_params.max_generate_length=64", "generator.sampling_params.stop=['x']")
    assert stop.arctic.batch.max_response_length == 65  # SkyRL appends an EOS after a stop string
    batched = run("generator.batched=true", "generator.max_turns=3")
    (issue,) = batched.issues
    assert issue.path == "generator.batched" and "single-turn" in issue.render()
    onprem = translate(parse_cli(SQL_SETTINGS), steps_per_epoch=4)  # the default backend: on-prem (ray)
    assert any("not trained (token_drift/turns" in n for n in onprem.notices)
    assert not any("token_drift" in n for n in multi.notices)  # the reference engine takes ids
    search = run(*SQL_SETTINGS, "environment.env_class=search")  # needs SkyRL's retrieval server at run time
    assert not search.issues
    assert any("http://127.0.0.1:8000/retrieve" in n and "does not contact it" in n for n in search.notices)

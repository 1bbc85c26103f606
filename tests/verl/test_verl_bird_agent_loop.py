"""BIRD multi-turn (SkyRL-SQL's protocol) as a verl agent loop: the adapter's `bird_sql_agent`
(adapter_verl.bird_agent_loop, registered through verl's `agent.agent_loop_config_path`) run by verl
0.9.1's own agent-loop worker over the Arctic rollout server, `ArcticBackend` and the real
arctic-platform 0.1.4 client against `arctic-rl serve --reference --fixed-rollouts`, which serves the
scripted turns of tests/shared/verl_bird_script.py (as token ids) and logs every request; and over a
vLLM-free stand-in serving the same turns (tests/shared/verl_agent_loop_run.py). One process, no Ray.

Checked per episode (a query then the answer, an answer at once, a run to `max_turns`, a query that fails
then a wrong answer): each sampled turn's ids at the response's mask-1 runs and the episode's own
observations (the query's real result, or its error, with the turns left) at its mask-0 runs; the
sampler's own record of each turn (verl's ids exactly, over the text-only wire); its per-token
log-probs; the episode's reward (1 / -1 / 0 as SkyRL-SQL) and counts, equal to the stand-in's; the
weights version each row carries."""

from __future__ import annotations

from pathlib import Path

import pytest
from verl_agent_loop_run import (
    ScriptedStandIn,
    agent_loop_config,
    assert_rollout_log_probs_are_the_models,
    fixed_rollouts_server,
    run_agent_loops,
    served_digests,
    turn_digests,
    unpadded_row,
)
from verl_bird_script import BIRD_SCENARIOS, MAX_TURNS, bird_fixed_rollouts, bird_rows, bird_turn_ids
from verl_tool_script import sampled_turns

pytest.importorskip("arctic_platform.client")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl_bird_agent_loop")


@pytest.fixture(scope="module")
def rows():
    return bird_rows()


def _verl_config(agent_loop_model_dir: Path, *extra: str):
    from adapter_verl.bird_agent_loop import AGENT_LOOP_CONFIG_FILE, AGENT_NAME

    return agent_loop_config(
        agent_loop_model_dir,
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG_FILE}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        *extra,
    )


@pytest.fixture(scope="module")
def runs(root, agent_loop_model_dir, agent_loop_tokenizer, rows):
    turns = {
        row["extra_info"]["question"]: [bird_turn_ids(agent_loop_tokenizer, t) for t in s.turns]
        for s, row in zip(BIRD_SCENARIOS, rows, strict=True)
    }
    config = _verl_config(
        agent_loop_model_dir, f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_TURNS}"
    )
    with fixed_rollouts_server(root, bird_fixed_rollouts(agent_loop_tokenizer, rows)) as server:
        yield run_agent_loops(
            config,
            rows,
            ScriptedStandIn(agent_loop_tokenizer, turns),
            server=server,
            model_dir=agent_loop_model_dir,
            root=root,
        )


def _observations(row, scenario) -> list[str]:
    """The observations the episode itself gives the scenario's actions (all but the last)."""
    from arctic_rl_core.envs.bird.multi_turn import BirdSQLEpisode

    episode = BirdSQLEpisode.from_row(row, max_turns=MAX_TURNS)
    return [episode.step(text).observation for text in scenario.turns[:-1]]


def _observation_runs(response: list[int], mask: list[int]) -> list[list[int]]:
    return sampled_turns(response, [1 - m for m in mask])


@pytest.mark.parametrize("index", range(len(BIRD_SCENARIOS)), ids=[s.name for s in BIRD_SCENARIOS])
def test_each_turn_is_the_sampled_turn_and_each_observation_the_episodes(
    runs, agent_loop_tokenizer, rows, index
):
    scenario, row = BIRD_SCENARIOS[index], rows[index]
    prompt, response, mask, _ = unpadded_row(runs.arctic, index)
    assert row["extra_info"]["question"] in agent_loop_tokenizer.decode(prompt)
    # every turn served was asked for and sits in the row as sampled (a query turn stopped at </sql>,
    # no EOS; the answer's EOS kept): ended at the answer, or at max_turns
    assert sampled_turns(response, mask) == [bird_turn_ids(agent_loop_tokenizer, t) for t in scenario.turns]
    observations = _observations(row, scenario)
    assert _observation_runs(response, mask) == [
        agent_loop_tokenizer.encode(text, add_special_tokens=False) for text in observations
    ]
    for text, observed in zip(observations, scenario.observed, strict=True):
        assert observed in text
    # verl's count: user + assistant turns + 1 (the last action gets no observation)
    assert int(runs.arctic.non_tensor_batch["__num_turns__"][index]) == 2 * scenario.assistant_turns


def test_the_sampler_conditioned_every_turn_on_verls_ids(runs):
    """The server's record of each generate (the digest of its own tokenisation of the text it was sent,
    with the ids it served) is verl's row before each turn with that turn's ids: over the text-only wire,
    each turn sampled from exactly the ids trained on (the replica traced each as exact)."""
    from adapter_verl.trace import read_trace

    served = served_digests(runs.requests)
    assert served == turn_digests(runs.arctic)
    assert len(served) == sum(s.assistant_turns for s in BIRD_SCENARIOS)
    traced = [r for r in read_trace(runs.trace_dir) if r["op"] == "generate"]
    assert len(traced) == len(served) and all(r["sent_as"] == "text" and r["exact"] for r in traced)


def test_rollout_log_probs_are_the_samplers_for_each_sampled_token(
    runs, agent_loop_model_dir, agent_loop_tokenizer
):
    scripted = sum(len(bird_turn_ids(agent_loop_tokenizer, t)) for s in BIRD_SCENARIOS for t in s.turns)
    assert assert_rollout_log_probs_are_the_models(runs.arctic, agent_loop_model_dir) == scripted


def test_rewards_and_counts_are_the_episodes_and_equal_the_stand_ins(runs):
    arctic, stand_in = runs.arctic, runs.stand_in
    for i in range(len(BIRD_SCENARIOS)):
        assert unpadded_row(arctic, i)[:3] == unpadded_row(stand_in, i)[:3]  # the same ids and masks
    rewards = arctic.batch["rm_scores"].sum(-1).tolist()
    assert rewards == [s.reward for s in BIRD_SCENARIOS] == stand_in.batch["rm_scores"].sum(-1).tolist()
    extra = arctic.non_tensor_batch
    assert list(extra["acc"]) == [1.0, 1.0, 0.0, 0.0]
    assert list(extra["well_formed"]) == [1.0, 1.0, 0.0, 1.0]
    assert list(extra["turns"]) == [float(s.assistant_turns) for s in BIRD_SCENARIOS]
    assert list(extra["sql_calls"]) == [1.0, 0.0, float(MAX_TURNS - 1), 1.0]  # the last action runs nothing
    assert list(extra["env_error"]) == [0.0] * len(BIRD_SCENARIOS)
    for key in ("acc", "well_formed", "turns", "sql_calls", "env_error"):
        assert list(extra[key]) == list(stand_in.non_tensor_batch[key])


def test_each_row_carries_the_weights_version_it_was_sampled_with(runs):
    from adapter_verl.verl_internals import WEIGHTS_VERSION_KEY

    assert list(runs.arctic.non_tensor_batch[WEIGHTS_VERSION_KEY]) == [0] * len(BIRD_SCENARIOS)


def test_an_episode_that_raises_keeps_its_row_untrained_and_the_batch_goes_on(
    agent_loop_model_dir, agent_loop_tokenizer, rows, monkeypatch, caplog
):
    """The episode of the first question raises at its second step (after its query ran): that row ends
    there, whole turns kept but none trained (mask 0), reward 0, env_error 1, the error logged with its
    request id; the other episodes run as scripted (vLLM-free stand-in, no server)."""
    import asyncio

    from arctic_rl_core.envs.bird.multi_turn import BirdSQLEpisode
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl_agent_loop_run import agent_loop_batch

    step = BirdSQLEpisode.step

    def flaky(self, action):
        if self.turns == 1 and "charter" in self.gold_sql:
            raise RuntimeError("the SQL sandbox went away")
        return step(self, action)

    monkeypatch.setattr(BirdSQLEpisode, "step", flaky)
    turns = {
        row["extra_info"]["question"]: [bird_turn_ids(agent_loop_tokenizer, t) for t in s.turns]
        for s, row in zip(BIRD_SCENARIOS, rows, strict=True)
    }
    config = _verl_config(
        agent_loop_model_dir, f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_TURNS}"
    )
    worker = AgentLoopWorker(config, ScriptedStandIn(agent_loop_tokenizer, turns))
    with caplog.at_level("ERROR", logger="adapter_verl.bird_agent_loop"):
        output = asyncio.run(worker.generate_sequences(agent_loop_batch(rows)))
    assert (
        "raised at turn 2; its row is kept untrained" in caplog.text
        and "the SQL sandbox went away" in caplog.text
    )
    _, response, mask, _ = unpadded_row(output, 0)
    query, answer = turns[rows[0]["extra_info"]["question"]]
    assert (
        response[: len(query)] == query and response[-len(answer) :] == answer
    )  # both turns kept as sampled
    assert set(mask) == {0}  # none trained
    rewards = output.batch["rm_scores"].sum(-1).tolist()
    assert rewards == [0.0] + [s.reward for s in BIRD_SCENARIOS[1:]]
    assert list(output.non_tensor_batch["env_error"]) == [1.0, 0.0, 0.0, 0.0]


def test_the_loop_needs_the_episodes_turn_limit(agent_loop_model_dir, agent_loop_tokenizer):
    from adapter_verl.bird_agent_loop import BirdSQLAgentLoop
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    config = _verl_config(agent_loop_model_dir)
    assert config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns is None
    with pytest.raises(ValueError, match=r"multi_turn.max_assistant_turns=None.*--max-turns N"):
        BirdSQLAgentLoop(
            trainer_config=DictConfigWrap(config),
            server_manager=None,
            tokenizer=agent_loop_tokenizer,
            processor=None,
            dataset_cls=None,
            data_config=DictConfigWrap(config.data),
        )

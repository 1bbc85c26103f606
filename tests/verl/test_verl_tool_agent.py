"""verl 0.9.1's own agent-loop worker running its `tool_agent` loop (hermes tool calls, verl's GSM8K tool
through the adapter's `adapter_verl.gsm8k_tool` and a function tool) over the adapter's Arctic rollout
server (`ArcticRolloutServer`, what each replica's Ray actor runs), `ArcticBackend` and the real
arctic-platform 0.1.4 client over HTTP, against `arctic-rl serve --reference --fixed-rollouts`: the server
serves the scripted assistant turns of tests/shared/verl_tool_script.py (as token ids) and logs every
request. One process, no Ray: verl's `AgentLoopWorker.generate_sequences` is called directly, as its Ray
actor would be.

Checked per trajectory: the turns verl's loop took (an early end, `max_assistant_turns`, a tool that
raises), every sampled turn's ids at the response's mask-1 runs and the tool responses at its mask-0
runs, the sampler's own record of each turn (the server's request log: the digest of the prompt ids it
conditioned on and the ids it served: verl's ids exactly), the per-token log-probs (the tiny model's own
log-probs of each sampled token after verl's ids), and the rewards of verl's reward manager, equal to
those it gives the same worker run over a vLLM-free stand-in server that answers the same turns."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from verl_agent_loop_run import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    ScriptedStandIn,
    agent_loop_config,
    assert_rollout_log_probs_are_the_models,
    fixed_rollouts_server,
    run_agent_loops,
    served_digests,
    turn_digests,
    unpadded_row,
)
from verl_tool_script import (
    LOOKUP_TOOL_FILE,
    MAX_ASSISTANT_TURNS,
    SCENARIOS,
    fixed_rollouts,
    sampled_turns,
    turn_ids,
    write_tool_config,
)

pytest.importorskip("arctic_platform.client")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl_tool_agent")


@pytest.fixture(scope="module")
def server(root, agent_loop_tokenizer):
    with fixed_rollouts_server(root, fixed_rollouts(agent_loop_tokenizer)) as running:
        yield running


def _verl_config(root: Path, agent_loop_model_dir: Path):
    return agent_loop_config(
        agent_loop_model_dir,
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_ASSISTANT_TURNS}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={write_tool_config(root / 'tools.yaml')}",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={LOOKUP_TOOL_FILE}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    )


async def _rewards(config, agent_loop_tokenizer, output) -> list[float]:
    """verl's reward manager (the naive one its reward loop runs for openai/gsm8k rows)."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    manager = NaiveRewardManager(config, agent_loop_tokenizer, compute_score=None)
    return [float((await manager.run_single(output[i : i + 1]))["reward_score"]) for i in range(len(output))]


@pytest.fixture(scope="module")
def runs(root, agent_loop_model_dir, agent_loop_tokenizer, server):
    """The worker's output over the Arctic path and over the stand-in, the server's record of the
    Arctic run's requests, the replica server's queue stats, and verl's rewards of both outputs."""
    config = _verl_config(root, agent_loop_model_dir)
    stand_in = ScriptedStandIn(
        agent_loop_tokenizer,
        {s.question: [turn_ids(agent_loop_tokenizer, t) for t in s.turns] for s in SCENARIOS},
    )
    rows = [s.row(i) for i, s in enumerate(SCENARIOS)]
    done = run_agent_loops(
        config,
        rows,
        stand_in,
        server=server,
        model_dir=agent_loop_model_dir,
        root=root,
    )

    async def rewards():
        return await _rewards(config, agent_loop_tokenizer, done.arctic), await _rewards(
            config, agent_loop_tokenizer, done.stand_in
        )

    return config, done.arctic, done.stand_in, done.requests, done.queue, asyncio.run(rewards())


@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=[s.name for s in SCENARIOS])
def test_each_turn_is_the_sampled_turn_and_each_tool_response_is_masked(runs, agent_loop_tokenizer, index):
    _, arctic, _, _, _, _ = runs
    scenario = SCENARIOS[index]
    prompt, response, mask, _ = unpadded_row(arctic, index)
    assert scenario.question in agent_loop_tokenizer.decode(prompt)
    turns = sampled_turns(response, mask)
    expected = [turn_ids(agent_loop_tokenizer, text) for text in scenario.turns[: scenario.assistant_turns]]
    assert turns == expected  # ended early / stopped at max_assistant_turns / went on after an error
    assert int(arctic.non_tensor_batch["__num_turns__"][index]) == 2 * scenario.assistant_turns
    observations = agent_loop_tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
    for text in scenario.tool_texts:  # each executed call's answer, as the tool (or verl) wrote it
        assert text in observations
    assert observations.count("<|im_start|>tool") == len(scenario.tool_texts)


def test_the_sampler_conditioned_every_turn_on_verls_ids(runs):
    """The server's record of each generate: the digest of (its tokenisation of the prompt text, the ids
    it served). verl's ids before each turn, with that turn's ids, give every digest the server logged:
    the decoded text re-encoded to exactly verl's ids, turn by turn."""
    _, arctic, _, requests, _, _ = runs
    served = served_digests(requests)
    assert served == turn_digests(arctic)
    assert len(served) == sum(s.assistant_turns for s in SCENARIOS)


def test_rollout_log_probs_are_the_samplers_for_each_sampled_token(
    runs, agent_loop_model_dir, agent_loop_tokenizer
):
    """With `calculate_log_probs` (verl's default) every sampled token carries the sampler's log-prob of
    it after verl's exact context (the fixed-rollouts server reports the tiny model's, teacher-forced);
    tool-response tokens carry 0."""
    _, arctic, _, _, _, _ = runs
    scripted = sum(
        len(turn_ids(agent_loop_tokenizer, t)) for s in SCENARIOS for t in s.turns[: s.assistant_turns]
    )
    assert assert_rollout_log_probs_are_the_models(arctic, agent_loop_model_dir) == scripted


def test_rewards_equal_verls_over_a_stand_in_for_the_same_turns(runs, agent_loop_tokenizer):
    _, arctic, stand_in, _, _, (rewards, stand_in_rewards) = runs
    for i in range(len(SCENARIOS)):
        assert (
            unpadded_row(arctic, i)[:3] == unpadded_row(stand_in, i)[:3]
        )  # the same ids and masks, vLLM-free
    tool_rewards = [list(x) for x in arctic.non_tensor_batch["tool_rewards"]]
    assert tool_rewards == [list(x) for x in stand_in.non_tensor_batch["tool_rewards"]]
    # the GSM8K tool's step rewards: 0 for an answer better than the last, -0.05 otherwise; the
    # function tool's error counts 0 (verl's loop)
    assert tool_rewards == [[0.0], [], [-0.05, -0.05], [0.0]]
    assert rewards == stand_in_rewards
    assert rewards == [s.reward for s in SCENARIOS]


def test_the_replica_batched_the_turns_and_reports_its_queue(runs):
    _, _, _, _, queue, _ = runs
    turns = sum(s.assistant_turns for s in SCENARIOS)
    assert queue.requests == turns and 1 <= queue.calls <= turns
    assert queue.in_flight_max >= 1 and 0 < queue.busy_fraction <= 1


def test_verls_multi_turn_settings_run_or_are_refused_at_dry_run(root, agent_loop_model_dir):
    """verl's GSM8K tool-agent example's settings pass the adapter's whole check; the multi-turn knobs
    verl 0.9.1 never reads are refused, each naming its field and the fix."""
    from adapter_verl.main import check

    rollout = "actor_rollout_ref.rollout"
    example = [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.model.path={agent_loop_model_dir}",
        "data.train_batch_size=4",
        f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={RESPONSE_LENGTH}",
        f"{rollout}.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        f"{rollout}.log_prob_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=1",
        f"{rollout}.tensor_model_parallel_size=1",
        f"trainer.default_local_dir={root / 'dry'}",
        "remote_backend.core.backend.kind=reference",
        f"{rollout}.agent.default_agent_loop=tool_agent",
        f"{rollout}.multi_turn.enable=true",
        f"{rollout}.multi_turn.max_assistant_turns=5",
        f"{rollout}.multi_turn.max_user_turns=5",
        f"{rollout}.multi_turn.max_parallel_calls=2",
        f"{rollout}.multi_turn.max_tool_response_length=512",
        f"{rollout}.multi_turn.tool_response_truncate_side=left",
        f"{rollout}.multi_turn.format=hermes",
        f"{rollout}.multi_turn.tool_config_path={write_tool_config(root / 'dry_tools.yaml')}",
        f"{rollout}.multi_turn.function_tool_path={LOOKUP_TOOL_FILE}",
    ]
    assert check(example).problems == []
    dead = {
        "use_inference_chat_template": "true",
        "tokenization_sanity_check_mode": "disable",
        "num_repeat_rollouts": "2",
    }
    problems = check([*example, *(f"{rollout}.multi_turn.{k}={v}" for k, v in dead.items())]).problems
    assert len(problems) == len(dead), problems
    for key, problem in zip(dead, problems, strict=True):
        assert f"{rollout}.multi_turn.{key}" in problem and "remove it" in problem, problem

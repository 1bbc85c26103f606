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
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from verl_e2e_run import TINY_MODEL
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

PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 256


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl_tool_agent")


@pytest.fixture(scope="module")
def model_dir(root) -> Path:
    from arctic_rl_core.config.reference_model import ReferenceModelConfig
    from arctic_rl_testbed.reference.model import save_model_dir

    return save_model_dir(root / "model", ReferenceModelConfig(**TINY_MODEL), seed=42)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(model_dir))


@pytest.fixture(scope="module")
def server(root, tokenizer):
    from wire_server import serve_reference

    fixed = root / "fixed.json"
    fixed.write_text(json.dumps(fixed_rollouts(tokenizer)))
    args = ["--fixed-rollouts", str(fixed), "--request-log", str(root / "requests.jsonl")]
    with serve_reference(root / "server", args=args) as running:
        yield running


def _verl_config(root: Path, model_dir: Path):
    from adapter_verl.main import compose

    return compose(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=arctic",
            f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_ASSISTANT_TURNS}",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={write_tool_config(root / 'tools.yaml')}",
            f"actor_rollout_ref.rollout.multi_turn.function_tool_path={LOOKUP_TOOL_FILE}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
        ]
    )


def _batch():
    from verl import DataProto

    rows = [s.row(i) for i, s in enumerate(SCENARIOS)]
    columns = {
        "raw_prompt": [r["prompt"] for r in rows],
        "agent_name": [r["agent_name"] for r in rows],
        "data_source": [r["data_source"] for r in rows],
        "reward_model": [r["reward_model"] for r in rows],
        "extra_info": [r["extra_info"] for r in rows],
        "tools_kwargs": [r["extra_info"]["tools_kwargs"] for r in rows],
        "index": [r["extra_info"]["index"] for r in rows],
    }
    non_tensor = {}
    for key, values in columns.items():
        array = np.empty(len(values), dtype=object)
        array[:] = values
        non_tensor[key] = array
    return DataProto.from_dict(non_tensors=non_tensor)


class StandIn:
    """A vLLM-free server for verl's agent loop: answers each request with the next scripted turn of
    the question its prompt holds (no sampler, no Arctic)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.served: dict[str, int] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        text = self.tokenizer.decode(prompt_ids)
        (scenario,) = [s for s in SCENARIOS if s.question in text]
        turn = self.served.get(scenario.name, 0)
        self.served[scenario.name] = turn + 1
        return TokenOutput(token_ids=turn_ids(self.tokenizer, scenario.turns[turn]), log_probs=None)


class ReplicaClient:
    """What verl's LLM-server client does for the agent loop, minus Ray: the replica server's generate."""

    def __init__(self, server) -> None:
        self.server = server

    async def generate(self, request_id, **kwargs):
        return await self.server.generate(request_id, **kwargs)


async def _rewards(config, tokenizer, output) -> list[float]:
    """verl's reward manager (the naive one its reward loop runs for openai/gsm8k rows)."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    manager = NaiveRewardManager(config, tokenizer, compute_score=None)
    return [float((await manager.run_single(output[i : i + 1]))["reward_score"]) for i in range(len(output))]


@pytest.fixture(scope="module")
def runs(root, model_dir, tokenizer, server):
    """The worker's output over the Arctic path and over the stand-in, the server's record of the
    Arctic run's requests, and the replica server's queue stats."""
    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.replica import ArcticRolloutServer
    from adapter_verl.session import SessionInfo
    from arctic_rl_core.backends.arctic import ArcticBackend
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    config = _verl_config(root, model_dir)
    cfg = server.core_config(
        f"model.name={model_dir}",
        f"batch.max_prompt_length={PROMPT_LENGTH}",
        f"batch.max_response_length={RESPONSE_LENGTH}",
        f"checkpoint.path={root / 'ckpt'}",
    )
    backend = ArcticBackend.from_config(cfg)
    try:
        replica = ArcticRolloutServer(
            replica_rank=0, response_length=RESPONSE_LENGTH, max_num_seqs=8, prompt_length=PROMPT_LENGTH
        )
        settings = ArcticVerlSettings(
            core=cfg.model_dump(mode="json", exclude_unset=True),
            model_path=str(model_dir),
            trace_dir=str(root / "trace"),
        )
        replica.attach(SessionInfo(handle=backend.handle(), settings=settings))
        mark = server.request_count()

        async def both():
            arctic = await AgentLoopWorker(config, ReplicaClient(replica)).generate_sequences(_batch())
            queue = await replica.take_sampler_queue_stats()
            await replica.disconnect()
            stand_in = await AgentLoopWorker(config, StandIn(tokenizer)).generate_sequences(_batch())
            rewards = await _rewards(config, tokenizer, arctic), await _rewards(config, tokenizer, stand_in)
            return arctic, queue, stand_in, rewards

        arctic, queue, stand_in, rewards = asyncio.run(both())
        yield config, arctic, stand_in, server.requests(mark), queue, rewards
    finally:
        from arctic_rl_core import dispatch

        dispatch.run(backend.shutdown())


def _row(output, i: int) -> tuple[list[int], list[int], list[int], list[float] | None]:
    """(prompt ids, response ids, response mask, rollout log-probs) of row i without padding."""
    batch = output.batch
    prompt_width = batch["prompts"].shape[1]
    attention = batch["attention_mask"][i]
    prompt = batch["prompts"][i][attention[:prompt_width].bool()].tolist()
    valid = int(attention[prompt_width:].sum())
    response = batch["responses"][i][:valid].tolist()
    mask = batch["response_mask"][i][:valid].tolist()
    logprobs = batch["rollout_log_probs"][i][:valid].tolist() if "rollout_log_probs" in batch else None
    return prompt, response, mask, logprobs


@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=[s.name for s in SCENARIOS])
def test_each_turn_is_the_sampled_turn_and_each_tool_response_is_masked(runs, tokenizer, index):
    _, arctic, _, _, _, _ = runs
    scenario = SCENARIOS[index]
    prompt, response, mask, _ = _row(arctic, index)
    assert scenario.question in tokenizer.decode(prompt)
    turns = sampled_turns(response, mask)
    expected = [turn_ids(tokenizer, text) for text in scenario.turns[: scenario.assistant_turns]]
    assert turns == expected  # ended early / stopped at max_assistant_turns / went on after an error
    assert int(arctic.non_tensor_batch["__num_turns__"][index]) == 2 * scenario.assistant_turns
    observations = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
    for text in scenario.tool_texts:  # each executed call's answer, as the tool (or verl) wrote it
        assert text in observations
    assert observations.count("<|im_start|>tool") == len(scenario.tool_texts)


def test_the_sampler_conditioned_every_turn_on_verls_ids(runs):
    """The server's record of each generate: the digest of (its tokenisation of the prompt text, the ids
    it served). verl's ids before each turn, with that turn's ids, give every digest the server logged:
    the decoded text re-encoded to exactly verl's ids, turn by turn."""
    from arctic_rl_testbed.reference.http_server import rollout_digest

    _, arctic, _, requests, _, _ = runs
    served = [d for r in requests if r["route"] == "/generate" for d in r["rollouts"]]
    expected = []
    for i in range(len(SCENARIOS)):
        prompt, response, mask, _ = _row(arctic, i)
        starts = [k for k, m in enumerate(mask) if m and (k == 0 or not mask[k - 1])]
        for start, turn in zip(starts, sampled_turns(response, mask), strict=True):
            expected.append(rollout_digest(prompt + response[:start], turn))
    assert sorted(served) == sorted(expected)
    assert len(served) == sum(s.assistant_turns for s in SCENARIOS)


def test_rollout_log_probs_are_the_samplers_for_each_sampled_token(runs, model_dir):
    """With `calculate_log_probs` (verl's default) every sampled token carries the sampler's log-prob of
    it after verl's exact context (the fixed-rollouts server reports the tiny model's, teacher-forced);
    tool-response tokens carry 0."""
    from transformers import AutoModelForCausalLM

    _, arctic, _, _, _, _ = runs
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    for i in range(len(SCENARIOS)):
        prompt, response, mask, logprobs = _row(arctic, i)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
        expected = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1].gather(
            -1, torch.tensor(response).unsqueeze(-1)
        )[:, 0]
        got = torch.tensor(logprobs)
        assert torch.allclose(got[torch.tensor(mask).bool()], expected[torch.tensor(mask).bool()], atol=1e-4)
        assert (got[~torch.tensor(mask).bool()] == 0).all()


def test_rewards_equal_verls_over_a_stand_in_for_the_same_turns(runs, tokenizer):
    _, arctic, stand_in, _, _, (rewards, stand_in_rewards) = runs
    for i in range(len(SCENARIOS)):
        assert _row(arctic, i)[:3] == _row(stand_in, i)[:3]  # the same ids and masks, vLLM-free
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


def test_verls_multi_turn_settings_run_or_are_refused_at_dry_run(root, model_dir):
    """verl's GSM8K tool-agent example's settings pass the adapter's whole check; the multi-turn knobs
    verl 0.9.1 never reads are refused, each naming its field and the fix."""
    from adapter_verl.main import check

    rollout = "actor_rollout_ref.rollout"
    example = [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.model.path={model_dir}",
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

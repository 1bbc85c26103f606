"""verl's `tool_agent` loop in verl's real process layout: `python -m adapter_verl.main` (the V1 trainer,
the rank-0 forwarder worker, the agent-loop worker and the rollout replica in their own Ray processes,
each with its own real arctic-platform 0.1.4 client) against `arctic-rl serve --reference
--fixed-rollouts`, which serves the scripted assistant turns of tests/shared/verl_tool_script.py (GSM8K
rows with verl's GSM8K tool and a raising function tool; `rollout.n=1`, so each question's turns arrive
in order) for 3 steps. One run, several checks (it costs ~2-4 minutes):

- token faithfulness end to end: every turn the replica sent (verl's ids) is what the sampler conditioned
  on (the server's own record of each generate), and every trained row is one whole conversation, its
  turns the ids sampled (the server's record of each forward-backward);
- verl's reward of every row (its GSM8K reward manager: 1 for the three conversations that end with the
  right `####` answer, 0 for the one stopped by `max_assistant_turns`), the turns verl logged;
- the sampler's queue, logged per step;
- learning: the sampler's log-probs of the rewarded conversations' sampled tokens (advantage 1 with one
  rollout per prompt) rise step after step, while the served tokens stay the same."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from verl_e2e_run import TINY_MODEL, run_verl_main, step_metrics
from verl_tool_script import (
    LOOKUP_TOOL_FILE,
    MAX_ASSISTANT_TURNS,
    SCENARIOS,
    fixed_rollouts,
    write_tool_config,
)

pytest.importorskip("arctic_platform.client")

STEPS, PROMPT_LENGTH, RESPONSE_LENGTH = 3, 1024, 256
ROWS = len(SCENARIOS)  # one step: every question once (rollout.n=1)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    import pandas as pd
    from arctic_rl_core.config.reference_model import ReferenceModelConfig
    from arctic_rl_testbed.reference.model import save_model_dir

    root = tmp_path_factory.mktemp("verl_tool_agent_wire")
    save_model_dir(root / "model", ReferenceModelConfig(**TINY_MODEL), seed=42)
    (root / "data").mkdir()
    pd.DataFrame([s.row(i) for i, s in enumerate(SCENARIOS)]).to_parquet(root / "data" / "train.parquet")
    write_tool_config(root / "tools.yaml")
    return root


@pytest.fixture(scope="module")
def server(workdir):
    from verl.utils import hf_tokenizer
    from wire_server import serve_reference

    tokenizer = hf_tokenizer(str(workdir / "model"))
    fixed = workdir / "fixed.json"
    fixed.write_text(json.dumps(fixed_rollouts(tokenizer, repeats=STEPS)))
    args = ["--fixed-rollouts", str(fixed), "--request-log", str(workdir / "requests.jsonl")]
    with serve_reference(workdir / "server", args=args) as running:
        yield running


@pytest.fixture(scope="module")
def run(workdir, server):
    core = "++remote_backend.core."
    data = workdir / "data" / "train.parquet"
    overrides = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={ROWS}",
        f"data.max_prompt_length={PROMPT_LENGTH}",
        f"data.max_response_length={RESPONSE_LENGTH}",
        "data.dataloader_num_workers=0",
        "data.shuffle=false",
        f"actor_rollout_ref.model.path={workdir / 'model'}",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_ASSISTANT_TURNS}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={workdir / 'tools.yaml'}",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={LOOKUP_TOOL_FILE}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={ROWS}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.optim.lr=5e-3",
        "reward.num_workers=1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.total_epochs={STEPS}",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={workdir / 'ckpt'}",
        f"trainer.rollout_data_dir={workdir / 'rollouts'}",
        "ray_kwargs.ray_init.num_cpus=8",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        *server.overrides(core, model=False),
        f"{core}zorro.enable=false",
        f"remote_backend.trace_dir={workdir / 'trace'}",
    ]
    mark = server.request_count()
    code, log = run_verl_main(workdir, overrides, log_name="tool_agent.log")
    assert code == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
    assert server.jobs() == {}, "the run left jobs on the server"
    return log, server.requests(mark)


def _generates(workdir: Path) -> list[dict]:
    from adapter_verl.trace import read_trace

    return [r for r in read_trace(workdir / "trace") if r["op"] == "generate"]


def _conversations(generates: list[dict]) -> list[list[dict]]:
    """The replica's generate records grouped by conversation (a turn's prompt starts with the previous
    turn's prompt and response), in order of their first turn."""
    conversations: list[list[dict]] = []
    for record in generates:
        for turns in conversations:
            last = turns[-1]
            head = last["prompt_ids"] + last["response_ids"]
            if record["prompt_ids"][: len(head)] == head and len(record["prompt_ids"]) > len(head):
                turns.append(record)
                break
        else:
            conversations.append([record])
    return conversations


def _dumped(workdir: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (workdir / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def test_every_turn_is_sampled_on_verls_ids_and_every_trained_row_is_a_whole_conversation(workdir, run):
    from arctic_rl_testbed.reference.http_server import rollout_digest

    _, requests = run
    generates = _generates(workdir)
    conversations = _conversations(generates)
    assert len(generates) == STEPS * sum(s.assistant_turns for s in SCENARIOS)
    # every turn went to the on-prem wire as text and was read back as exactly verl's ids
    assert all(g["sent_as"] == "text" and g["exact"] for g in generates)
    assert sorted(len(c) for c in conversations) == sorted(
        s.assistant_turns for s in SCENARIOS for _ in range(STEPS)
    )
    # what the sampler conditioned on and served, by its own record: verl's ids, turn by turn
    served = sorted(d for r in requests if r["route"] == "/generate" for d in r["rollouts"])
    assert served == sorted(rollout_digest(g["prompt_ids"], g["response_ids"]) for g in generates)
    # what was trained: each conversation whole (first prompt; every turn and tool response after it)
    trained = sorted(d for r in requests if r["route"] == "/forward-backward" for d in r["rollouts"])
    whole = []
    for turns in conversations:
        prompt, last = turns[0]["prompt_ids"], turns[-1]
        whole.append(rollout_digest(prompt, (last["prompt_ids"] + last["response_ids"])[len(prompt) :]))
    assert trained == sorted(whole)


def test_verls_rewards_and_turns(workdir, run):
    log, _ = run
    by_question = {s.question: s for s in SCENARIOS}
    for step in range(1, STEPS + 1):
        rows = _dumped(workdir, step)
        assert len(rows) == ROWS
        for row in rows:
            (scenario,) = [s for q, s in by_question.items() if q in row["input"]]
            assert row["score"] == scenario.reward, (scenario.name, row["output"][-200:])
            for text in scenario.tool_texts:
                assert text in row["output"]
        metrics = step_metrics(log, step)
        # verl's num_turns: user + assistant turns + 1 (2 x assistant turns here)
        assert metrics["num_turns/min"] == 2 and metrics["num_turns/max"] == 2 * MAX_ASSISTANT_TURNS
        assert metrics["critic/score/mean"] == pytest.approx(sum(s.reward for s in SCENARIOS) / ROWS)
        turns = sum(s.assistant_turns for s in SCENARIOS)
        assert metrics["sampler_queue/requests"] == turns and metrics["sampler_queue/calls"] <= turns
        assert metrics["token_drift/turns"] == 0  # no turn left out of the loss
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0


def test_the_rewarded_conversations_become_more_likely_step_after_step(workdir, run):
    """The served turns are fixed; the policy trains on them (advantage = reward with one rollout per
    prompt), so the sampler's log-probs of the rewarded conversations' sampled tokens, reported with
    each turn after each step's weight sync, rise step after step."""
    from verl.utils import hf_tokenizer

    tokenizer = hf_tokenizer(str(workdir / "model"))
    logprobs: dict[tuple[bool, int], list[float]] = {}
    for turns in _conversations(_generates(workdir)):
        text = tokenizer.decode(turns[0]["prompt_ids"])
        (scenario,) = [s for s in SCENARIOS if s.question in text]
        key = (scenario.reward > 0, turns[0]["weights_version"])
        logprobs.setdefault(key, []).extend(lp for turn in turns for lp in turn["logprobs"])
    assert {version for _, version in logprobs} == set(range(STEPS))  # one optimizer step per step
    rewarded = [sum(logprobs[(True, v)]) / len(logprobs[(True, v)]) for v in range(STEPS)]
    unrewarded = [sum(logprobs[(False, v)]) / len(logprobs[(False, v)]) for v in range(STEPS)]
    print(f"\nmean sampler log-prob per token, steps 1-{STEPS}: rewarded {rewarded}, unrewarded {unrewarded}")
    assert rewarded[0] < rewarded[1] < rewarded[2]

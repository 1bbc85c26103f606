"""A verl multi-turn GRPO run that learns on CPU over the real wire: `python -m adapter_verl.main` (verl
0.9.1's V1 trainer, its agent-loop worker, the arctic rollout replica and the rank-0 forwarder, each Ray
process with its own real arctic-platform 0.1.4 client through `ArcticBackend`) against the suite's
`arctic-rl serve --reference`, the agent loop `vowel_turns` (tests/shared/verl_vowel_turns.py: the verl
form of SkyRL's `vowel_turns` environment; two sampled turns per trajectory with the user message "Say
more." between them, each turn rewarded with its vowel share / 2). One run serves every check:

- learning: verl's logged mean reward (`critic/score/mean`) of the last steps is above the first steps';
- every trajectory has two sampled turns (the replica's record of each request, verl's `num_turns`);
- token faithfulness, turn by turn: what the sampler conditioned on and drew (the server's record of each
  /generate) is each turn's context as the on-prem server reads its text and the ids verl's row holds;
  every trained row (the server's record of each /forward-backward) is one whole conversation; the tokens
  trained (the loss mask's sum) are exactly the sampled tokens of the turns read back exactly, the worker
  leaving a drifted turn out (`token_drift/turns`, as the replica's own record counts them);
- verl's reward of each trajectory is the sum of its turns' rewards, recomputed from the sampled ids.

verl's own `tool_agent` runs a second turn only when the model writes a tool call, which an untrained tiny
model never does: hence a loop of the test's on verl's agent-loop machinery. Four recorded runs (lr 0.05):
mean reward 0.38-0.39 over the first three steps; 1.0 from step 19-22 on in three, 0.67 in the fourth
(the policy settled on a token two-thirds vowels; the margin below allows for that). The share of turns left untrained
was 0.22-0.5 in the first steps and 0 once the policy settled on one token repeated (it survives the round
trip); in the fourth run every second turn drifted for ten steps. Cost: one verl start-up plus 24 steps of
~2.5-5 s: 152 s in a run of the verl suite under load, 420-476 s alone at load 12-20."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from verl_e2e_run import TINY_MODEL, run_overrides, run_verl_main, step_metrics

pytest.importorskip("arctic_platform.client")

STEPS, PROMPTS_PER_STEP, ROLLOUT_N, MAX_TURNS = 24, 4, 4, 2  # ~2.5 s a step here
RESPONSE_LENGTH = 48  # two turns of at most 8 tokens and the observation between them
ROWS = PROMPTS_PER_STEP * ROLLOUT_N


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    import pandas as pd
    from verl_vowel_turns import vowel_turns_rows, write_agent_loop_config
    from wire_server import tiny_model_dir

    root = tmp_path_factory.mktemp("verl_multi_turn_learns")
    tiny_model_dir(root / "model", 42, **TINY_MODEL)
    (root / "data").mkdir()
    frame = pd.DataFrame(vowel_turns_rows())
    frame.to_parquet(root / "data" / "train.parquet")
    frame.to_parquet(root / "data" / "dev.parquet")
    write_agent_loop_config(root / "agent_loops.yaml")
    return root


@pytest.fixture(scope="module")
def run(workdir, wire_server):
    wire_server.check_alive()
    assert wire_server.jobs() == {}
    core = "++remote_backend.core."
    shape = {"train_batch": PROMPTS_PER_STEP, "rollout_n": ROLLOUT_N, "max_response": RESPONSE_LENGTH}
    overrides = [
        *run_overrides(workdir, **shape, steps=STEPS),
        "actor_rollout_ref.rollout.agent.default_agent_loop=vowel_turns",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={workdir / 'agent_loops.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={MAX_TURNS}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={ROWS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_STEP}",  # one optimizer step per step
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={ROWS}",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.optim.lr=0.05",
        f"trainer.total_epochs={STEPS}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={workdir / 'ckpt'}",
        *wire_server.overrides(core, model=False),
        f"{core}zorro.enable=false",
        f"remote_backend.trace_dir={workdir / 'trace'}",
    ]
    mark = wire_server.request_count()
    code, log = run_verl_main(workdir, overrides, log_name="multi_turn.log", shared_on_path=True)
    assert code == 0, log[-6000:] + "\n--- server ---\n" + wire_server.log_tail()
    assert wire_server.jobs() == {}, "the run left jobs on the server"
    return log, wire_server.requests(mark)


def _trace(workdir: Path) -> list[dict]:
    from adapter_verl.trace import read_trace

    return read_trace(workdir / "trace")


def _conversations(trace: list[dict]) -> list[list[dict]]:
    """The replica's generate records grouped by trajectory, in order of their first turn: a turn whose
    prompt extends an open trajectory's last prompt and response continues it (verl's server manager
    sends each request with an id of its own; two trajectories that sampled the same first turn are
    interchangeable)."""
    conversations: list[list[dict]] = []
    for record in (r for r in trace if r["op"] == "generate"):
        for turns in conversations:
            head = turns[-1]["prompt_ids"] + turns[-1]["response_ids"]
            if len(turns) < MAX_TURNS and record["prompt_ids"][: len(head)] == head:
                turns.append(record)
                break
        else:
            conversations.append([record])
    return conversations


def test_the_mean_reward_rises(run):
    log, _ = run
    rewards = [step_metrics(log, step)["critic/score/mean"] for step in range(1, STEPS + 1)]
    print(f"\nverl vowel_turns mean reward per step: {[round(r, 3) for r in rewards]}")
    first, last = statistics.mean(rewards[:3]), statistics.mean(rewards[-3:])
    assert last > first + 0.2, rewards
    for step in range(1, STEPS + 1):
        metrics = step_metrics(log, step)
        assert math.isfinite(metrics["actor/pg_loss"])
        # a gradient wherever a group's rewards differ (none once every trajectory earns the same)
        tied = metrics["critic/score/max"] == metrics["critic/score/min"]
        assert (metrics["actor/grad_norm"] > 0) != tied, (step, metrics["actor/grad_norm"])


def test_every_trajectory_samples_two_turns(workdir, run):
    from learnable_reward import SAY_MORE
    from verl.utils import hf_tokenizer

    log, _ = run
    tokenizer = hf_tokenizer(str(workdir / "model"))
    conversations = _conversations(_trace(workdir))
    assert len(conversations) == STEPS * ROWS
    assert {len(turns) for turns in conversations} == {MAX_TURNS}
    for first, second in conversations:  # sampled on one step's weights, the observation between
        assert first["weights_version"] == second["weights_version"]
        between = second["prompt_ids"][len(first["prompt_ids"]) + len(first["response_ids"]) :]
        assert SAY_MORE in tokenizer.decode(between)
    for step in range(1, STEPS + 1):
        metrics = step_metrics(log, step)
        # verl's num_turns: user + assistant turns + 1
        assert metrics["num_turns/min"] == metrics["num_turns/max"] == 2 * MAX_TURNS
        assert metrics["sampler_queue/requests"] == ROWS * MAX_TURNS


def test_every_turn_trained_is_the_turn_sampled(workdir, run):
    from arctic_rl_core.multi_turn.prompt_text import PromptText
    from arctic_rl_testbed.reference.http_server import rollout_digest
    from verl.utils import hf_tokenizer

    log, requests = run
    text = PromptText(hf_tokenizer(str(workdir / "model")))
    trace = _trace(workdir)
    conversations = _conversations(trace)
    turns = [t for c in conversations for t in c]
    assert all(t["sent_as"] == "text" for t in turns)  # the on-prem server takes text
    # what the sampler conditioned on and drew, by its own record: each turn's context as the server
    # reads verl's ids sent as text (verl's ids themselves when `exact`), and the ids verl's row holds
    read = [list(text.server_ids(text.to_text(t["prompt_ids"]))) for t in turns]
    assert [t["exact"] for t in turns] == [ids == t["prompt_ids"] for ids, t in zip(read, turns, strict=True)]
    served = sorted(d for r in requests if r["route"] == "/generate" for d in r["rollouts"])
    assert served == sorted(
        rollout_digest(ids, t["response_ids"]) for ids, t in zip(read, turns, strict=True)
    )
    # what was trained: each conversation whole (first prompt; both turns and the observation between)
    trained = sorted(d for r in requests if r["route"] == "/forward-backward" for d in r["rollouts"])
    whole = []
    for first, last in conversations:
        prompt = first["prompt_ids"]
        whole.append(rollout_digest(prompt, (last["prompt_ids"] + last["response_ids"])[len(prompt) :]))
    assert trained == sorted(whole)
    # the tokens in the loss: every sampled token of each turn the sampler read exactly, no other
    # (the first turn's context is the chat template's own ids: always exact)
    assert all(first["exact"] for first, _ in conversations)
    by_version: dict[int, list[list[dict]]] = defaultdict(list)
    for conversation in conversations:
        by_version[conversation[0]["weights_version"]].append(conversation)
    updates = [r for r in trace if r["op"] == "forward_backward"]
    assert len(updates) == STEPS and sorted(by_version) == list(range(STEPS))
    drift = []
    for update, version in zip(updates, sorted(by_version), strict=True):
        step_turns = [t for c in by_version[version] for t in c]
        assert len(step_turns) == ROWS * MAX_TURNS
        exact = sum(len(t["response_ids"]) for t in step_turns if t["exact"])
        assert update["meta"]["batch_num_tokens"] == exact
        drift.append(sum(not t["exact"] for t in step_turns) / len(step_turns))
    logged = [step_metrics(log, step)["token_drift/turns"] for step in range(1, STEPS + 1)]
    print(f"\nshare of turns left untrained (drift) per step: {[round(d, 3) for d in logged]}")
    assert logged == pytest.approx(drift)
    # the untrained model's second turns often do not survive the text round trip (byte-level BPE
    # pieces re-merge): the leaving-out was exercised, not only the exact path
    assert max(drift) > 0


def test_verls_reward_is_the_sum_of_the_turns_rewards(workdir, run):
    from learnable_reward import turn_reward
    from verl.utils import hf_tokenizer

    log, _ = run
    tokenizer = hf_tokenizer(str(workdir / "model"))
    by_version: dict[int, list[float]] = defaultdict(list)
    for turns in _conversations(_trace(workdir)):
        texts = [tokenizer.decode(t["response_ids"], skip_special_tokens=True) for t in turns]
        by_version[turns[0]["weights_version"]].append(sum(turn_reward(x, MAX_TURNS) for x in texts))
    for step, version in enumerate(sorted(by_version), start=1):
        scores = by_version[version]
        assert step_metrics(log, step)["critic/score/mean"] == pytest.approx(statistics.mean(scores))

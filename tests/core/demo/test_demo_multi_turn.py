"""`arctic-rl demo --max-turns N` without a framework: the options, the BIRD multi-turn task (rows,
supervised pairs with real observations), the refusal of a driver that runs no multi-turn episodes, and
the episode accuracy's counts (EX, turns taken, endings) against scripted episodes."""

from __future__ import annotations

import asyncio

import pytest
from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.backends.protocol import Completion, FinishReason, GenerateOutput
from arctic_rl_testbed.demo.drivers import require_multi_turn_support
from arctic_rl_testbed.demo.options import DemoOptions
from arctic_rl_testbed.demo.tasks import load_task
from arctic_rl_testbed.reference.tokenizer import build_tokenizer


def test_multi_turn_is_the_bird_task_and_bounds_the_context(tmp_path):
    options = DemoOptions(out=str(tmp_path), max_turns=3)
    assert options.max_input_length == options.max_prompt_length + 2 * 2 * options.max_response_length
    with pytest.raises(ValueError, match="--max-turns 3 with --task gsm8k"):
        DemoOptions(out=str(tmp_path), max_turns=3, task="gsm8k")
    with pytest.raises(ValueError, match="the multi-turn task is BIRD"):
        load_task("gsm8k", max_turns=2)


def test_bird_multi_turn_rows_and_warm_start_pairs():
    tokenizer = build_tokenizer()
    task = load_task("bird", max_turns=3)
    assert task.max_turns == 3 and {r["env_class"] for r in task.train_rows + task.heldout_rows} == {
        "bird_multi_turn"
    }
    assert all(t.startswith("<think>") and t.endswith("</solution>") for t in task.train_targets)
    prompts, answers = task.warm_start_pairs(tokenizer)
    n = len(task.train_rows)
    looks = n // 2  # every other question also learns a first look, then the answer after its observation
    assert len(prompts) == len(answers) == n + 2 * looks == task.warm_start_size  # the deepspeed batch's rows
    for k in range(looks):
        look_prompt, look, after_prompt, after = (
            prompts[n + 2 * k],
            answers[n + 2 * k],
            prompts[n + 2 * k + 1],
            answers[n + 2 * k + 1],
        )
        i = 2 * k + 1
        assert look_prompt == prompts[i] and after == answers[i]  # the answer is the question's own
        text = tokenizer.decode(look)
        assert text.startswith("<think>") and text.endswith("</sql>") and tokenizer.eos_token_id not in look
        context = tokenizer.decode(after_prompt[len(prompts[i]) :])
        assert context.startswith(text) and "<observation>" in context and "2 turns left" in context
        assert "Error executing SQL" not in context  # the look ran on the question's database
    single = load_task("bird")
    assert single.max_turns == 1 and len(single.warm_start_pairs(tokenizer)[0]) == len(single.train_rows)
    assert single.warm_start_size == len(single.train_rows)


def test_a_driver_without_multi_turn_is_refused(tmp_path):
    def driver(*args, **kwargs):
        return None

    options = DemoOptions(out=str(tmp_path), max_turns=2, framework="verl")
    with pytest.raises(SystemExit, match="runs no multi-turn episodes"):
        require_multi_turn_support(driver, options)
    driver.supports_multi_turn = True
    require_multi_turn_support(driver, options)  # declared: accepted
    require_multi_turn_support(lambda: None, DemoOptions(out=str(tmp_path)))  # single turn: any driver


class ScriptedSampler(ForwardingBackend):
    """A sampler that answers each held-out question's turn k with `scripts[question][k - 1]` (the
    question found by its prompt ids, the turn by the observations in the context), as token ids."""

    def __init__(self, tokenizer, prompts: list[list[int]], scripts: list[list[str]]):
        super().__init__(None)
        self.tokenizer, self.prompts, self.scripts = tokenizer, prompts, scripts
        self.contexts: list[list[int]] = []  # every context sampled from, in order

    @property
    def accepts_token_ids(self) -> bool:
        return True

    async def generate(self, prompts, params):
        completions = []
        for context in prompts:
            self.contexts.append(list(context))
            (question,) = [q for q, p in enumerate(self.prompts) if list(context[: len(p)]) == p]
            turn = self.tokenizer.decode(context[len(self.prompts[question]) :]).count("<observation>")
            ids = tuple(self.tokenizer.encode(self.scripts[question][turn], add_special_tokens=False))
            completions.append(
                Completion(self.scripts[question][turn], ids, FinishReason.STOP, len(context), len(ids))
            )
        return GenerateOutput(completions=completions, weights_version=0)


def test_episode_accuracy_counts_the_turns_and_endings_of_the_episodes_run():
    """`demo --max-turns`'s accuracy: scripted episodes that answer at once (right, and wrong), look at the
    data then answer, never answer (max_turns), and outgrow the input length; the score's EX, turns taken,
    endings and per-episode records are those of the episodes the sampler was asked to continue."""
    from arctic_rl_testbed.demo.evaluation import evaluate_episodes
    from arctic_rl_testbed.demo.prompts import prompt_ids
    from arctic_rl_testbed.demo.tasks import bird_look, bird_solution

    tokenizer = build_tokenizer()
    task = load_task("bird", max_turns=3)
    rows = task.heldout_rows[:5]
    gold = [row["reward_model"]["ground_truth"] for row in rows]
    prompts = [prompt_ids(tokenizer, row["prompt"]) for row in rows]
    limit = max(len(p) for p in prompts) + 2000
    chatter = "<think>\n" + "more " * 2500 + "</think>\n<sql>SELECT 1</sql>"  # past the limit at once
    scripts = [
        [bird_solution(gold[0])],  # right at turn 1
        [bird_look(gold[1]), bird_solution(gold[1])],  # looks, then right at turn 2
        [bird_look(gold[2])] * 3,  # never answers: ended at max_turns, malformed
        [bird_solution("SELECT -12345")],  # a wrong result at turn 1
        [chatter],  # cut at max_input_length after turn 1
    ]
    sampler = ScriptedSampler(tokenizer, prompts, scripts)
    score = asyncio.run(
        evaluate_episodes(
            sampler, task, rows, tokenizer, max_tokens=64, max_input_length=limit, samples_per_prompt=2
        )
    )
    # each question twice (samples_per_prompt), every turn asked of the sampler: 1 + 2 + 3 + 1 + 1 per pass
    assert len(sampler.contexts) == 2 * 8
    assert (score.correct, score.total, score.well_formatted) == (4, 10, 6)
    assert score.turns == {1: 6, 2: 2, 3: 2}
    assert score.ended == {"solution": 6, "max_turns": 2, "context_limit": 2}
    assert score.errors == {"correct": 4, "wrong_result": 2, "malformed": 4}
    endings = ["solution", "solution", "max_turns", "solution", "context_limit"]
    rewards = [1.0, 1.0, -1.0, 0.0, 0.0]  # a cut episode keeps its last (intermediate) step's 0
    expected = [
        {"turns": len(s), "ended": e, "reward": r, "responses": s}
        for s, e, r in zip(scripts, endings, rewards, strict=True)
        for _ in range(2)
    ]
    assert score.episodes == expected
    record = score.to_json()
    assert record["turns"] == {"1": 6, "2": 2, "3": 2} and record["ended"] == score.ended
    assert record["episodes"] == expected and record["percent"] == 40.0

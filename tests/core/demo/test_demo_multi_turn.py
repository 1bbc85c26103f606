"""`arctic-rl demo --max-turns N` without a framework: the options, the BIRD multi-turn task (rows,
supervised pairs with real observations) and the refusal of a driver that runs no multi-turn episodes."""

from __future__ import annotations

import pytest
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

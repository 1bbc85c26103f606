"""The demo's tasks, supervised warm start and run log, on the core reference engine."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch
from arctic_rl_core.config.reference_model import ReferenceModelConfig
from arctic_rl_core.envs.bird.sql_extract import extract_sql, is_well_formatted
from arctic_rl_core.wire import IGNORE_INDEX
from arctic_rl_testbed.demo.prompts import prompt_ids, response_ids
from arctic_rl_testbed.demo.run_log import MetricsLog, step_line, step_table, write_plot
from arctic_rl_testbed.demo.tasks import bird_target, load_task
from arctic_rl_testbed.demo.warm_start import sft_payload, warm_start
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import OptimizerSettings, ReferenceEngineSettings

TINY = ReferenceModelConfig(
    num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1
)


@pytest.fixture(scope="module")
def bird():
    return load_task("bird")


def test_bird_task_trains_on_train_and_holds_out_the_dev_database(bird):
    assert len(bird.train_rows) == 16 and len(bird.heldout_rows) == 10
    train_dbs = {r["extra_info"]["db_id"] for r in bird.train_rows}
    heldout_dbs = {r["extra_info"]["db_id"] for r in bird.heldout_rows}
    assert heldout_dbs == {"movie_club"} and not train_dbs & heldout_dbs
    assert all(r["env_class"] == "bird" and r["prompt"][0]["role"] == "system" for r in bird.train_rows)
    assert "CREATE TABLE" in bird.train_rows[0]["prompt"][1]["content"]


def test_supervised_targets_are_well_formatted_and_carry_the_gold_sql(bird):
    for row, target in zip(bird.train_rows, bird.train_targets, strict=True):
        gold = row["reward_model"]["ground_truth"]
        assert is_well_formatted(target) and extract_sql(target).sql == gold.strip()
    assert bird_target("SELECT a FROM t1 JOIN `My T` ON x JOIN t1 ON y").startswith(
        "<think>\nRead t1, My T.\n"
    )


def test_official_ex_counts_gold_answers_right_and_noise_wrong(bird):
    rows = bird.heldout_rows
    gold = bird.score(rows, [bird_target(r["reward_model"]["ground_truth"]) for r in rows])
    assert (gold.metric, gold.correct, gold.total, gold.well_formatted) == ("EX", 10, 10, 10)
    assert gold.percent == 100.0
    wrong = ["<think>\nx\n</think>\n<answer>\n```sql\nSELECT 1\n```\n</answer>"] * 9 + ["no sql here"]
    score = bird.score(rows, wrong)
    assert score.correct == 0 and score.errors == {"wrong_result": 9, "no_prediction": 1}
    with pytest.raises(ValueError, match="9 responses for 10 prompts"):
        bird.score(rows, wrong[:9])


def test_gsm8k_task_holds_out_the_last_problems():
    task = load_task("gsm8k")
    assert len(task.train_rows) == 8 and len(task.heldout_rows) == 4
    assert all(r["env_class"] == "gsm8k_arctic" for r in task.train_rows + task.heldout_rows)
    answers = [f"so #### {r['reward_model']['ground_truth']}" for r in task.heldout_rows]
    assert task.score(task.heldout_rows, answers).correct == 4
    assert task.score(task.heldout_rows, ["#### -1", "none", "none", "none"]).errors == {
        "wrong_answer": 1,
        "no_answer": 3,
    }


def _engine(lr: float = 1e-2) -> ReferenceBackend:
    return ReferenceBackend(
        ReferenceEngineSettings(
            model=TINY, optimizer=OptimizerSettings(lr=lr), colocated=False, num_threads=1
        )
    )


def test_sft_payload_labels_exactly_the_answer_tokens():
    engine = _engine()
    try:
        payload = sft_payload(
            [[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], pad_token_id=0, max_prompt_len=4, max_response_len=3
        )
        labels = payload.batch["labels"]
        assert labels.tolist() == [
            [-100, -100, -100, -100, 9, 10, -100],
            [-100, -100, -100, -100, 11, 12, 13],
        ]
        assert payload.processing == {"post": [], "loss_fn": "sft"}
        assert (payload.batch["input_ids"][labels != IGNORE_INDEX] == labels[labels != IGNORE_INDEX]).all()
        with pytest.raises(ValueError, match="max_response_length=3"):
            sft_payload([[5]], [[1, 2, 3, 4]], pad_token_id=0, max_prompt_len=4, max_response_len=3)
    finally:
        asyncio.run(engine.shutdown())


def test_warm_start_through_the_backend_lowers_the_answer_loss(bird):
    engine = _engine()
    try:
        tokenizer = engine.tokenizer
        prompts = [prompt_ids(tokenizer, r["prompt"]) for r in bird.train_rows[:2]]
        answers = [response_ids(tokenizer, t) for t in bird.train_targets[:2]]
        assert answers[0][-1] == tokenizer.eos_token_id
        seen = []
        history = asyncio.run(
            warm_start(
                engine,
                prompts,
                answers,
                steps=6,
                batch_size=2,
                pad_token_id=engine.pad_token_id,
                max_prompt_len=640,
                max_response_len=192,
                seed=0,
                on_step=seen.append,
            )
        )
        assert seen == history and [h.step for h in history] == list(range(1, 7))
        assert history[-1].loss < history[0].loss - 0.5
        assert all(math.isfinite(h.grad_norm) and h.grad_norm > 0 for h in history)
        assert asyncio.run(engine.state()).trainer_version == 6  # one optimizer step per warm-start step
    finally:
        asyncio.run(engine.shutdown())


def test_metrics_log_keeps_the_latest_record_per_step_and_plots(tmp_path):
    log = MetricsLog(tmp_path)
    for step, reward in ((1, 0.1), (2, 0.2), (2, 0.3), (3, 0.5)):  # step 2 repeated by a resumed run
        log.append(
            "grpo_step", step=step, reward_mean=reward, loss=-reward, grad_norm=1.0, weights_version=step
        )
    log.append("eval", phase="before", split="heldout", percent=0.0)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and all("time" in line for line in lines)
    steps = log.grpo_steps()
    assert [s["reward_mean"] for s in steps] == [0.1, 0.3, 0.5]
    assert len(log.records("eval")) == 1
    table = step_table(steps)
    assert table.row_count == 3 and [c.header for c in table.columns][:2] == ["step", "reward"]
    line = step_line(3, 12, {**steps[-1], "rollout_ex": 25.0, "seconds_step": 7.25})
    assert line == "step 3/12  reward 0.500  EX 25%  loss -0.5000  |grad| 1.000  v3  7.2s"
    assert "reward -  EX -%" in step_line(1, 2, {"reward_mean": float("nan")})
    png = write_plot(steps, tmp_path / "plot.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tokens_match_the_generators_chat_template(bird):
    engine = _engine()
    try:
        ids = prompt_ids(engine.tokenizer, bird.train_rows[0]["prompt"])
        text = engine.tokenizer.apply_chat_template(
            bird.train_rows[0]["prompt"], add_generation_prompt=True, tokenize=False
        )
        assert engine.tokenizer.decode(ids) == text and text.endswith("<|im_start|>assistant\n")
        assert isinstance(torch.tensor(ids), torch.Tensor)
    finally:
        asyncio.run(engine.shutdown())

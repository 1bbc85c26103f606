"""`arctic-rl demo` for real through SkyRL 0.4.0's trainer on the reference backend, with tiny
settings: warm start, accuracy before, GRPO steps, Ctrl-C after step 1 leaving a checkpoint,
`--resume` finishing the run, and what the run directory holds (the checks every framework's demo
shares live in `tests/shared/demo_checks.py`); then the GSM8K task end to end."""

from __future__ import annotations

import json
import os

import pytest
from arctic_rl_testbed.demo import run as demo_run
from arctic_rl_testbed.demo.run_log import MetricsLog
from demo_checks import (
    assert_interrupted_then_resumed,
    assert_real_grpo_steps,
    assert_run_directory,
    run_interrupted_then_resumed,
    tiny_options,
)


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    return run_dir, *run_interrupted_then_resumed(tiny_options("skyrl", run_dir))


def test_ctrl_c_leaves_a_checkpoint_and_resume_finishes(interrupted_then_resumed):
    assert_interrupted_then_resumed(*interrupted_then_resumed)


def test_the_backend_ran_in_the_driver_process(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    placements = MetricsLog(run_dir).records("backend")
    assert [p["where"] for p in placements] == ["in process", "in process"]  # first attempt, resume
    assert {p["pid"] for p in placements} == {os.getpid()}


def test_steps_are_real_grpo_steps_on_advancing_weights(interrupted_then_resumed):
    assert_real_grpo_steps(interrupted_then_resumed[0])


def test_run_directory_holds_config_metrics_plot_checkpoints_and_summary(interrupted_then_resumed):
    run_dir, *_ = interrupted_then_resumed
    assert_run_directory(run_dir, "skyrl", step_override="trainer.max_training_steps=2")
    marker = json.loads(
        (run_dir / "checkpoints" / "global_step_2" / "policy" / "arctic_checkpoint.json").read_text()
    )
    # the run's backend checkpoints share one folder; the server keeps trainer.max_ckpts_to_keep=2 of them
    backend = run_dir / "checkpoints" / "arctic_backend"
    policy = run_dir / "checkpoints" / "global_step_2" / "policy"
    assert (
        marker["backend_path"] == "../../arctic_backend"
        and (policy / marker["backend_path"]).resolve() == backend.resolve()
    )
    assert (backend / f"checkpoint-{marker['step']}").is_dir()
    assert len([p for p in backend.iterdir() if p.name.startswith("checkpoint-")]) <= 2


def test_gsm8k_task_runs_end_to_end_with_its_own_reward_and_metric(tmp_path):
    from arctic_rl_core.envs.gsm8k import compute_score
    from arctic_rl_testbed.demo.tasks import load_task

    run_dir = tmp_path / "gsm8k"
    options = tiny_options(
        "skyrl",
        run_dir,
        task="gsm8k",
        steps=1,
        entropy_loss_coef=0.0,
        max_response_length=96,  # the longest supervised GSM8K answer is 64 tokens
    )
    assert demo_run.run_demo(options) == 0
    rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {row["env_class"] for row in rows} == {"gsm8k_arctic"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["task"] == "gsm8k" and summary["steps"] == [1]
    assert summary["after"]["heldout"]["metric"] == "accuracy" and summary["after"]["heldout"]["total"] == 4
    assert summary["after"]["train"]["total"] == 8
    assert 0.0 <= summary["reward_mean"][0] <= 1.0
    # the recorded accuracy is the GSM8K exact-answer score of the recorded greedy answers
    task = load_task("gsm8k")
    for record in MetricsLog(run_dir).records("eval"):
        split_rows = task.heldout_rows if record["split"] == "heldout" else task.train_rows
        rescored = [
            compute_score("gsm8k", answer, row["reward_model"]["ground_truth"])["score"]
            for answer, row in zip(record["answers"], split_rows, strict=True)
        ]
        assert record["correct"] == sum(rescored) and record["total"] == len(split_rows)


def test_the_adapter_registers_its_demo_driver():
    # the core's demo finds the GRPO phase through the adapter's entry point (the core imports no adapter)
    from adapter_skyrl.demo_driver import run_grpo
    from arctic_rl_testbed.demo.drivers import load_driver, registered_frameworks

    assert registered_frameworks() == ["skyrl"]
    assert load_driver("skyrl") is run_grpo


@pytest.mark.parametrize("colocate", [False, True], ids=["separate", "colocated"])
def test_demo_drives_an_arctic_server_through_the_real_client(wire, tmp_path, colocate):
    """`arctic-rl demo --server URL [--colocate]` against `arctic-rl serve --reference` in its own
    process: GRPO through SkyRL and `ArcticBackend` over HTTP, the accuracy after it on the server."""
    from demo_checks import run_against_server

    run_against_server("skyrl", tmp_path / "run", wire.url, colocate=colocate)


def test_bird_multi_turn_demo_shows_turns_and_accuracy_before_and_after(tmp_path, monkeypatch):
    """`arctic-rl demo --max-turns 2`: SkyRL's generator runs SkyRL-SQL's protocol (the Arctic
    `bird_multi_turn` environment, one continued message, stop at </sql> and </solution>); the accuracy
    before and after is over whole episodes, with how many took 1 and 2 turns and how they ended, each
    number that of the episodes the evaluation actually ran (recorded at the environment); each step logs
    the mean turns."""
    from arctic_rl_core.envs.bird.multi_turn import (
        SOLUTION_CLOSE,
        SOLUTION_OPEN,
        STOP_STRINGS,
        BirdSQLEpisode,
    )
    from arctic_rl_testbed.demo import evaluation

    evaluations: list[dict[int, tuple]] = []  # per evaluate_episodes call: each episode's (episode, steps)
    recording: dict[int, tuple] | None = None
    step, evaluate = BirdSQLEpisode.step, evaluation.evaluate_episodes

    def recorded_step(self, action):
        result = step(self, action)
        if recording is not None:
            recording.setdefault(id(self), (self, []))[1].append((action, result))
        return result

    async def recorded_evaluate(*args, **kwargs):
        nonlocal recording
        recording = {}
        try:
            return await evaluate(*args, **kwargs)
        finally:
            evaluations.append(recording)
            recording = None

    monkeypatch.setattr(BirdSQLEpisode, "step", recorded_step)
    monkeypatch.setattr(demo_run, "evaluate_episodes", recorded_evaluate)  # where the driver looks it up
    run_dir = tmp_path / "multi_turn"
    options = tiny_options("skyrl", run_dir, max_turns=2, steps=1, eval_samples=1)
    assert demo_run.run_demo(options) == 0
    rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()]
    assert {row["env_class"] for row in rows} == {"bird_multi_turn"}
    overrides = (run_dir / "config.yaml").read_text()
    for setting in (
        "generator.max_turns=2",
        "generator.use_conversation_multi_turn=false",
        "generator.batched=false",
    ):
        assert setting in overrides
    assert all(stop in overrides for stop in STOP_STRINGS)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["max_turns"] == 2

    def ran(episodes: dict[int, tuple]) -> dict:
        """The counts of the episodes run, from their steps: turns, endings, EX."""
        turns, ended, correct = {}, {"solution": 0, "max_turns": 0, "context_limit": 0}, 0
        for _, steps in episodes.values():
            turns[str(len(steps))] = turns.get(str(len(steps)), 0) + 1
            last_action, last = steps[-1]
            if not last.done:
                ended["context_limit"] += 1
            elif SOLUTION_OPEN in last_action and SOLUTION_CLOSE in last_action:
                ended["solution"] += 1
            else:
                assert len(steps) == 2  # the environment ends an unanswered episode at max_turns only
                ended["max_turns"] += 1
            correct += int(last.done and last.reward == 1.0)
        return {"total": len(episodes), "turns": turns, "ended": ended, "correct": correct}

    # greedy then sampled (1 per question), held-out then train, before then after GRPO
    assert len(evaluations) == 8
    calls = iter(evaluations)
    records = iter(MetricsLog(run_dir).records("eval"))
    for phase in ("before", "after"):
        for split, total in (("heldout", 10), ("train", 16)):
            score = summary[phase][split]
            assert score["metric"] == "EX" and score["total"] == total
            assert sum(score["errors"].values()) == total and score["correct"] <= score["well_formatted"]
            greedy, sampled = next(calls), next(calls)
            for reported, episodes in ((score, greedy), (score["sampled"], sampled)):
                assert {k: reported[k] for k in ("total", "turns", "ended", "correct")} == ran(episodes)
            record = next(records)
            assert (record["phase"], record["split"]) == (phase, split)
            assert [(e["turns"], e["responses"]) for e in record["episodes"]] == [
                (len(steps), [action for action, _ in steps]) for _, steps in greedy.values()
            ]
    (step_record,) = MetricsLog(run_dir).grpo_steps()
    assert 1.0 <= step_record["turns_mean"] <= 2.0

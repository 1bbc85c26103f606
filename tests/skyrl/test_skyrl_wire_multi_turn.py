"""Multi-turn SkyRL through `ArcticBackend` and the real arctic-platform 0.1.4 client over HTTP, against
`arctic-rl serve --reference` (the session's server, tests/shared/wire_server.py): SkyRL's real
`RayPPOTrainer.train()` with SkyRL's own generator, one step each of multi-turn GSM8K (SkyRL's
`gsm8k_multi_turn`, chat turns) and SkyRL-SQL-style BIRD (SkyRL's own `text2sql` on SkyRL-SQL's data
layout, its launcher's generator settings). The on-prem server takes text, so every turn goes as text:

- each turn's ids (what the sampler read, what it drew) are the server's own record of it: its request
  log's digest per rollout at /generate;
- the rows trained are the rows the generator returned: the server's digest per row at
  /forward-backward;
- a turn the server read as other ids than the row holds is not trained (loss mask 0 from its tokens
  on); every other sampled token is, with the server's log-probs;
- rewards, response ids, stop reasons and log-probs equal what SkyRL's own generator makes of the same
  turns on a vLLM-free engine (`skyrl_multi_turn.skyrl_replay`)."""

from __future__ import annotations

import math

import pytest
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_testbed.reference.http_server import rollout_digest
from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, logged_steps, run_grpo
from skyrl_multi_turn import (
    SQL_STOP,
    bird_multi_turn_rows,
    drop_prompt_repair,
    gsm8k_multi_turn_rows,
    skyrl_replay,
    skyrl_sql_layout,
    text2sql_rows,
    write_jsonl,
)
from wire_server import tiny_model_dir

SEED = 11
ONE_STEP = [
    "generator.batched=false",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "trainer.micro_train_batch_size_per_gpu=2",
    "trainer.update_epochs_per_batch=1",
    "generator.n_samples_per_prompt=2",
    "trainer.max_training_steps=1",
    "trainer.ckpt_interval=0",
    "trainer.resume_mode=none",
    "trainer.algorithm.use_kl_loss=false",
]
SQL_GENERATOR = [  # SkyRL-SQL's generator settings (examples/train/text_to_sql/run_skyrl_sql.sh)
    "generator.use_conversation_multi_turn=false",
    f"generator.sampling_params.stop={SQL_STOP}",
    f"generator.eval_sampling_params.stop={SQL_STOP}",
    "generator.max_turns=3",
    "trainer.max_prompt_length=1024",
    "generator.max_input_length=1536",
    "generator.sampling_params.max_generate_length=12",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-model"), SEED, **TINY_MODEL)


def wire_run(wire, model_dir, root, data, *extra):
    mark = wire.request_count()
    exp = run_grpo(
        [
            *wire.overrides("trainer.arctic_rl.", model=False),
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=['{data}']",
            f"trainer.seed={SEED}",
            f"trainer.ckpt_path={root / 'ckpt'}",
            f"trainer.export_path={root / 'export'}",
            f"trainer.arctic_rl.checkpoint.path={root / 'server'}",
            *ONE_STEP,
            *extra,
        ],
        base=[a for a in TINY_GRPO if not a.startswith("generator.batched")],
        shutdown=True,
    )
    assert isinstance(exp.backend, ArcticBackend) and wire.jobs() == {}
    return exp, wire.requests(mark)


def check_against_the_server(exp, requests):
    """Turns vs the server's /generate record, trained rows vs its /forward-backward record, masks vs
    each turn's fidelity; returns (turns, drifted turns)."""
    (batch,) = exp.generator.batches
    out, reports = batch["output"], batch["reports"]
    served = [d for r in requests if r["route"] == "/generate" for d in r.get("rollouts", [])]
    turns = [t for report in reports for t in report.turns]
    assert sorted(served) == sorted(rollout_digest(t.context_ids, t.token_ids) for t in turns)
    assert all(t.sent_as == "text" for t in turns)
    trained = [d for r in requests if r["route"] == "/forward-backward" for d in r.get("rollouts", [])]
    rows = [rollout_digest(p, r) for p, r in zip(out["prompt_token_ids"], out["response_ids"], strict=True)]
    assert sorted(trained) == sorted(rows)
    eos = exp.generator.tokenizer.eos_token_id
    drifted = 0
    for i, report in enumerate(reports):
        mask, logprobs, response = out["loss_masks"][i], out["rollout_logprobs"][i], out["response_ids"][i]
        first = report.turns[0]
        assert tuple(out["prompt_token_ids"][i]) == first.context_ids  # the prompt as the server read it
        exact = len(report.turns) - report.drifted_turns
        drifted += report.drifted_turns
        for k, turn in enumerate(report.turns):
            start = len(turn.prompt_ids) - len(first.prompt_ids)
            kept = [t for j, t in enumerate(turn.token_ids) if j < len(turn.token_ids) - 1 or t != eos]
            assert response[start : start + len(kept)] == kept  # the sampled ids, where SkyRL put them
            if k < exact:
                assert mask[start : start + len(kept)] == [1] * len(kept)
                assert logprobs[start : start + len(kept)] == list(turn.logprobs[: len(kept)])
                assert turn.context_ids == first.context_ids + turn.prompt_ids[len(first.prompt_ids) :]
            else:
                assert not any(mask[start:])  # read as other ids: not trained
        if exact < len(report.turns):
            assert not report.turns[exact].exact or exact == 0
    return len(turns), drifted


def check_equals_skyrls_generator(exp):
    (batch,) = exp.generator.batches
    out, reports = batch["output"], batch["reports"]
    skyrl = skyrl_replay(exp.cfg, exp.generator.tokenizer, batch["input"], reports)
    arctic = drop_prompt_repair(out, reports)
    for key in ("prompt_token_ids", "response_ids", "rewards", "stop_reasons", "rollout_logprobs"):
        assert arctic[key] == skyrl[key], key
    for i, report in enumerate(reports):  # SkyRL's masks, with the drifted turns' tokens not trained
        if report.drifted_turns == 0:
            assert out["loss_masks"][i] == skyrl["loss_masks"][i]


def test_wire_multi_turn_gsm8k(wire, model_dir, tmp_path):
    data = write_jsonl(gsm8k_multi_turn_rows(2), tmp_path / "gsm8k_multi_turn.jsonl")
    exp, requests = wire_run(
        wire, model_dir, tmp_path, data, "generator.max_turns=3", "trainer.max_prompt_length=256",
        "generator.max_input_length=512", "generator.sampling_params.max_generate_length=8",
    )  # fmt: skip
    (step,) = logged_steps(exp).values()
    assert math.isfinite(step["policy/policy_loss"])
    turns, drifted = check_against_the_server(exp, requests)
    assert turns == 4 * step["generate/turns_mean"] and step["generate/turns_max"] <= 3
    assert step["token_drift/turns"] == drifted / turns
    assert step["sampler_queue/requests"] == turns
    check_equals_skyrls_generator(exp)
    print(f"multi-turn GSM8K over the wire: {turns} turns, {drifted} read as other ids (masked)")


def test_wire_skyrl_sql_bird(wire, model_dir, tmp_path):
    rows = text2sql_rows(bird_multi_turn_rows(max_turns=3)[:2])
    data = write_jsonl(rows, tmp_path / "skyrl_sql.jsonl")
    db_root = skyrl_sql_layout(tmp_path / "sql_data")
    exp, requests = wire_run(
        wire, model_dir, tmp_path, data, *SQL_GENERATOR, "environment.env_class=text2sql",
        f"environment.skyrl_gym.text2sql.db_path={db_root}",
    )  # fmt: skip
    (step,) = logged_steps(exp).values()
    assert math.isfinite(step["policy/policy_loss"])
    turns, drifted = check_against_the_server(exp, requests)
    # the untrained model writes no <solution>: every episode runs to max_turns, SkyRL-SQL's -1 reward
    assert turns == 4 * 3 and step["generate/turns_max"] == 3
    assert exp.generator.batches[0]["rewards"] == [-1.0] * 4
    check_equals_skyrls_generator(exp)
    print(f"SkyRL-SQL BIRD over the wire: {turns} turns, {drifted} read as other ids (masked)")

"""SkyRL 0.4.0's fully asynchronous trainer (`FullyAsyncRayPPOTrainer.train()`, through the adapter)
against `arctic-rl serve --reference` in its own process, through `ArcticBackend` and the real
arctic-platform 0.1.4 client over HTTP: 3 steps, one step of staleness allowed
(`trainer.fully_async.max_staleness_steps=1`), SkyRL's rollout_is loss with its token TIS.

The checks rest on what the SERVER saw (the session server's request log, `--request-log`): each /generate line
carries the weights version the sampler served and a digest of every rollout it returned; each
/forward-backward line the trainer's version and the digests of the rollouts it trains. So every
trained rollout is traced back to the generate call that sampled it, and its staleness (trainer
version - sampling version) is measured on the server, not taken from the client.

A second run (3 steps) does the same with SkyRL's generator running two turns per trajectory
(`generator.max_turns=2`, the `vowel_turns` rows of tests/shared/skyrl_multi_turn.py): each trained row is
traced to the generator's row, and its turns to the generate calls that sampled them."""

from __future__ import annotations

import math
import time

import pytest
from arctic_rl_core.backends.arctic import ArcticBackend
from skyrl_e2e_run import TINY_FULLY_ASYNC, TINY_MODEL, logged_steps, run_grpo
from wire_server import tiny_model_dir

SEED = 7
MAX_STALENESS = 1


def wire_async_run(wire_server, root, data, steps, *extra):
    """SkyRL's fully async trainer on `data` against the session's server (it logs every request), `steps`
    steps; returns (exp, its requests)."""
    model_dir = tiny_model_dir(root / "model", SEED, **TINY_MODEL)
    wire_server.check_alive()
    assert wire_server.jobs() == {}
    mark = wire_server.request_count()
    start = time.perf_counter()
    exp = run_grpo(
        [
            *wire_server.overrides("trainer.arctic_rl.", model=False),
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=['{data}']",
            f"trainer.seed={SEED}",
            f"trainer.max_training_steps={steps}",
            f"trainer.fully_async.max_staleness_steps={MAX_STALENESS}",
            f"trainer.ckpt_path={root / 'ckpt'}",
            f"trainer.export_path={root / 'export'}",
            f"trainer.arctic_rl.checkpoint.path={root / 'server'}",
            *extra,
        ],
        base=TINY_FULLY_ASYNC,
        backend_factory=ArcticBackend.from_config,
        shutdown=True,
    )
    print(f"SkyRL fully async wire run ({steps} steps): {time.perf_counter() - start:.1f} s")
    assert wire_server.jobs() == {}  # the run destroyed the jobs it created
    return exp, wire_server.requests(mark)


@pytest.fixture(scope="module")
def async_run(wire_server, learnable_jsonl, tmp_path_factory):
    return wire_async_run(wire_server, tmp_path_factory.mktemp("skyrl_wire_async"), learnable_jsonl, 3)


def _server_view(lines):
    """(version of each sampled rollout by digest, [(trainer version, [digests])] per training call)."""
    sampled: dict[str, list[int]] = {}
    trained = []
    for line in lines:
        if line["route"] == "/generate" and line["status"] == 200:
            for digest in line["rollouts"]:
                sampled.setdefault(digest, []).append(int(line["weights_version"]))
        if line["route"] == "/forward-backward" and line["status"] == 200:
            trained.append((int(line["trainer_version"]), list(line["rollouts"])))
    return sampled, trained


def test_the_fully_async_trainer_ran_through_the_real_client(async_run):
    from adapter_skyrl.fully_async import ArcticFullyAsyncPPOTrainer

    exp, _ = async_run
    assert type(exp.trainer) is ArcticFullyAsyncPPOTrainer
    assert isinstance(exp.backend, ArcticBackend)
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2, 3]
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"]) and step["policy/grad_norm"] > 0
        assert step["arctic/off_policy/is_ratio_mean"] > 0  # SkyRL's TIS ran on pi_old vs pi_rollout


def test_every_trained_rollout_is_within_the_staleness_bound_as_the_server_saw_it(async_run):
    exp, lines = async_run
    sampled, trained = _server_view(lines)
    assert [version for version, _ in trained] == [0, 1, 2]  # one optimizer step per SkyRL step
    staleness = []
    for trainer_version, digests in trained:
        assert len(digests) == 2  # one prompt group of 2 rollouts per step
        for digest in digests:
            assert digest in sampled, "a trained rollout the server never sampled"
            version = max(v for v in sampled[digest] if v <= trainer_version)
            staleness.append(trainer_version - version)
    assert all(0 <= s <= MAX_STALENESS for s in staleness), staleness
    # generation overlapped training: a later step trained rollouts sampled before the last sync
    assert max(staleness) == MAX_STALENESS, staleness
    # the client's record of each trained group's version is the server's
    client = [v for _, _, versions in exp.trainer.trained_versions for v in versions for _ in range(2)]
    server = [max(v for v in sampled[d] if v <= t) for t, digests in trained for d in digests]
    assert client == server


def test_weights_were_synced_after_every_training_step(async_run):
    _, lines = async_run
    events = [
        "sync" if line.get("operation_type") == "weight-sync" else line["route"]
        for line in lines
        if line.get("operation_type") == "weight-sync" or line["route"] == "/forward-backward"
    ]
    # the initial sync, then after each of the 3 training steps one sync before the next step
    assert events == [
        "sync",
        "/forward-backward",
        "sync",
        "/forward-backward",
        "sync",
        "/forward-backward",
        "sync",
    ]


# -- the same trainer with SkyRL's generator running two turns per trajectory ---------------------------
MULTI_TURN_STEPS = 3


@pytest.fixture(scope="module")
def multi_turn_async_run(wire_server, tmp_path_factory):
    """SkyRL's fully async trainer on the `vowel_turns` rows (tests/shared/skyrl_multi_turn.py: every
    trajectory two turns, "Say more." between them) with `generator.max_turns=2`, against the session's
    server; returns (exp, its requests)."""
    from skyrl_multi_turn import vowel_turns_rows, write_jsonl

    root = tmp_path_factory.mktemp("skyrl_wire_async_multi_turn")
    data = write_jsonl(vowel_turns_rows(), root / "vowel_turns.jsonl")
    extra = ("generator.max_turns=2", "generator.max_input_length=256")
    return wire_async_run(wire_server, root, data, MULTI_TURN_STEPS, *extra)


def test_fully_async_multi_turn_trains_two_turn_trajectories_as_sampled(multi_turn_async_run):
    """Every trajectory SkyRL's generator ran took two turns, each turn the sampler's (its record of what
    it read and drew); every step trained rows the generator returned, within the staleness bound."""
    from arctic_rl_testbed.reference.http_server import rollout_digest

    exp, lines = multi_turn_async_run
    steps = logged_steps(exp)
    assert sorted(steps) == list(range(1, MULTI_TURN_STEPS + 1))
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"]) and step["policy/grad_norm"] > 0
    reports = [r for batch in exp.generator.batches for r in batch["reports"]]
    assert reports and {len(r.turns) for r in reports} == {2}
    for batch in exp.generator.batches:  # each row holds both turns and the observation between them
        assert all(text.count("Say more.") == 1 for text in batch["texts"])
    turns = [t for r in reports for t in r.turns]
    assert all(t.sent_as == "text" for t in turns)
    # every turn is one the server sampled from the ids the turn records it read (generation still in
    # flight when training ended is the server's alone)
    served = {d for line in lines if line["route"] == "/generate" for d in line.get("rollouts", [])}
    assert {rollout_digest(t.context_ids, t.token_ids) for t in turns} <= served
    # each row the generator returned, by the server's digest of it, with its turns' digests
    row_turns = {}
    for batch in exp.generator.batches:
        out = batch["output"]
        for p, r, report in zip(out["prompt_token_ids"], out["response_ids"], batch["reports"], strict=True):
            row_turns[rollout_digest(p, r)] = [
                rollout_digest(t.context_ids, t.token_ids) for t in report.turns
            ]
    sampled, trained = _server_view(lines)
    assert [version for version, _ in trained] == list(range(MULTI_TURN_STEPS))  # one optimizer step each
    staleness = []
    for trainer_version, digests in trained:
        assert len(digests) == 2  # one prompt group of 2 two-turn rows per step
        for digest in digests:
            assert digest in row_turns, "a trained row the generator never returned"
            # the row's oldest turn, by the weights version the server sampled it with
            oldest = min(max(v for v in sampled[d] if v <= trainer_version) for d in row_turns[digest])
            staleness.append(trainer_version - oldest)
    assert all(0 <= s <= MAX_STALENESS for s in staleness), staleness

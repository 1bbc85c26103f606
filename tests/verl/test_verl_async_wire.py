"""verl 0.9.1's separate-async trainer through the adapter, end to end over the wire: `python -m
adapter_verl.main` with verl's own `trainer.v1.trainer_mode=separate_async` (the adapter's
`arctic_separate_async`), 3 GRPO steps through `ArcticBackend` and the real arctic-platform 0.1.4
client over HTTP to `arctic-rl serve --reference --no-colocate` in its own process.

verl's own staleness field (`trainer.v1.sampler.max_off_policy_threshold=2`: a trajectory may span
2 steps) is `async.max_staleness=1`; its prefetch window (`num_warmup_batches=1`) puts one batch of
prompts ahead of training, so step 2 trains rollouts sampled before step 1's update. Every check
reads what the server saw (its request log: the weights version each /generate sampled with, the
trainer version of each /forward-backward, a digest of every sequence both returned and trained),
and verl's own logged metrics. A second run on the same server takes verl's bypass mode
(`algorithm.rollout_correction.bypass_mode=true`: old log-probs = the rollout's) with
`parameter_sync_step=2`: two updates per weight sync, `async.max_staleness = 2 x 2 - 1 = 3`. Two runs per
module, one after the other (Ray + TransferQueue start-up dominate each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verl_e2e_run import prepare_workdir, run_overrides, run_verl_main, step_metrics
from wire_server import serve_reference

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE, STEPS = 2, 2, 8, 3
THRESHOLD = 2  # verl's max_off_policy_threshold: max_staleness = THRESHOLD - 1 (ppo_epochs=1)
# the bypass-mode run: SYNC_STEP updates of one 1-prompt mini-batch per weight sync, BYPASS_STEPS verl steps;
# max_staleness = (THRESHOLD x SYNC_STEP - 1) x ppo_epochs
SYNC_STEP, BYPASS_TRAIN_BATCH, BYPASS_STEPS = 2, 2, 2
BYPASS_K = THRESHOLD * SYNC_STEP - 1


def async_overrides(root: Path, server) -> list[str]:
    shape = {"train_batch": TRAIN_BATCH, "rollout_n": ROLLOUT_N, "max_response": MAX_RESPONSE}
    return [
        *run_overrides(root, **shape, steps=STEPS),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={root / 'ckpt'}",
        # verl's separate-async mode, as verl's own launchers set it
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.hybrid_engine=false",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "trainer.v1.separate_async.num_warmup_batches=1",
        f"trainer.v1.sampler.max_off_policy_threshold={THRESHOLD}",
        *("++remote_backend.core." + o for o in server.overrides(model=False)),
        f"remote_backend.trace_dir={root / 'trace'}",
    ]


def bypass_overrides(root: Path, server) -> list[str]:
    """The same run with verl's bypass mode and SYNC_STEP updates of one mini-batch per weight sync."""
    replaced = {
        "data.train_batch_size": str(BYPASS_TRAIN_BATCH),
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(BYPASS_TRAIN_BATCH // SYNC_STEP),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": str(
            BYPASS_TRAIN_BATCH // SYNC_STEP * ROLLOUT_N
        ),
        "trainer.total_training_steps": str(BYPASS_STEPS),
        "trainer.v1.separate_async.parameter_sync_step": str(SYNC_STEP),
        "trainer.default_local_dir": str(root / "ckpt_bypass"),
        "remote_backend.trace_dir": str(root / "trace_bypass"),
    }
    kept = [o for o in async_overrides(root, server) if o.partition("=")[0] not in replaced]
    return [
        *kept,
        *(f"{k}={v}" for k, v in replaced.items()),
        "algorithm.rollout_correction.bypass_mode=true",
    ]


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    """One reference server for the module's two verl runs (one after the other)."""
    root = tmp_path_factory.mktemp("verl_async_wire")
    prepare_workdir(root)
    requests_log = root / "requests.jsonl"
    args = ["--no-colocate", "--num-threads", "1", "--request-log", str(requests_log)]
    with serve_reference(root / "server", args=args, file_root=root) as server:
        yield {"server": server, "root": root, "requests_log": requests_log}


def _verl_run(wire, overrides: list[str], name: str) -> dict:
    """`python -m adapter_verl.main` against the module's server; the server's requests it answered."""
    server, root, requests_log = wire["server"], wire["root"], wire["requests_log"]
    before = len(requests_log.read_text().splitlines()) if requests_log.exists() else 0
    returncode, log = run_verl_main(root, overrides, log_name=f"{name}.log")
    assert returncode == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
    jobs = server.jobs()
    lines = requests_log.read_text().splitlines()[before:]
    return {"log": log, "requests": [json.loads(line) for line in lines], "jobs": jobs, "root": root}


@pytest.fixture(scope="module")
def run(wire):
    return _verl_run(wire, async_overrides(wire["root"], wire["server"]), "run")


@pytest.fixture(scope="module")
def bypass_run(wire, run):
    """After `run` (its requests are not this run's)."""
    return _verl_run(wire, bypass_overrides(wire["root"], wire["server"]), "bypass_run")


def _sampled_versions(requests: list[dict]) -> dict[str, int]:
    sampled: dict[str, int] = {}
    for entry in requests:
        if entry["route"] == "/generate":
            for row in entry["rollouts"]:
                sampled.setdefault(row, entry["weights_version"])
    return sampled


def test_the_adapter_selected_its_separate_async_trainer(run):
    assert "trainer.v1.trainer_mode=separate_async: now arctic_separate_async" in run["log"]
    assert run["jobs"] == {}  # the trainer shut its backend down after fit


def test_every_trained_rollout_was_sampled_within_the_staleness_bound(run):
    """From the server's own log: each trained row is a sequence some /generate returned, and the
    trainer's version when it trained it minus the sampler's version when it sampled it is in [0, 1]."""
    sampled: dict[str, int] = {}
    for entry in run["requests"]:
        if entry["route"] == "/generate":
            for row in entry["rollouts"]:
                sampled.setdefault(row, entry["weights_version"])
    trains = [e for e in run["requests"] if e["route"] == "/forward-backward"]
    assert [e["trainer_version"] for e in trains] == list(range(STEPS))  # one update per verl step
    staleness = []
    for entry in trains:
        assert len(entry["rollouts"]) == TRAIN_BATCH * ROLLOUT_N
        for row in entry["rollouts"]:
            assert row in sampled, "a trained row the server never generated"
            staleness.append(entry["trainer_version"] - sampled[row])
    assert min(staleness) >= 0 and max(staleness) <= THRESHOLD - 1
    # the prefetched batch (sampled with version 0) is trained at step 2 by the trainer at version 1:
    # generation really ran ahead of training
    assert max(staleness) == 1


def test_weights_reach_the_sampler_at_every_step_boundary(run):
    syncs = [e for e in run["requests"] if e.get("operation_type") == "weight-sync"]
    versions = [e["weights_version"] for e in run["requests"] if e["route"] == "/generate"]
    assert len(syncs) == STEPS + 1  # on_init_end, then after every step
    assert versions == sorted(versions) and set(versions) <= set(range(STEPS))


def test_verl_logged_the_versions_staleness_and_is_weights(run):
    for step in range(1, STEPS + 1):
        metrics = step_metrics(run["log"], step)
        assert metrics["arctic/weights_version"] == step
        assert metrics["actor/async/max_staleness"] == THRESHOLD - 1
        assert 0 <= metrics["actor/async/staleness_max"] <= THRESHOLD - 1
        # verl's own view of the same versions (the replicas report them in extra_fields)
        assert 0 <= metrics["training/off_policy/trajectory_staleness/max"] <= THRESHOLD - 1
        # the truncated IS weights (cap 2.0) went on the wire
        assert 0 < metrics["actor/async/is_weight_max"] <= 2.0
    assert step_metrics(run["log"], 2)["actor/async/staleness_max"] == 1


# -- parameter_sync_step=2 in verl's bypass mode (the same server, a second run) ----------------------------


def test_bypass_mode_trains_sync_step_mini_batches_per_weight_sync(bypass_run):
    """verl's step = SYNC_STEP updates, then one sync: the server saw SYNC_STEP forward-backwards (one
    optimizer step each) between consecutive weight syncs, the trainer's version advancing by one per
    update and the sampler's weights by SYNC_STEP per sync; no old-log-prob forward (bypass mode)."""
    requests = bypass_run["requests"]
    assert bypass_run["jobs"] == {}
    routes = [e["route"] for e in requests]
    # verl took the old log-probs from the rollout: no forward once sampling began (the one before is the
    # backend's start-up call; `run` has one more before each of its updates)
    assert "/forward" not in routes[routes.index("/generate") :]
    assert routes.count("/forward") == 1
    trains = [e for e in requests if e["route"] == "/forward-backward"]
    assert [e["trainer_version"] for e in trains] == list(range(BYPASS_STEPS * SYNC_STEP))
    assert all(len(e["rollouts"]) == BYPASS_TRAIN_BATCH // SYNC_STEP * ROLLOUT_N for e in trains)
    # updates between consecutive weight syncs (the first sync is on_init_end's, before any update)
    per_sync, count = [], None
    for entry in requests:
        if entry.get("operation_type") == "weight-sync":
            if count is not None:
                per_sync.append(count)
            count = 0
        elif entry["route"] == "/forward-backward" and count is not None:
            count += 1
    assert per_sync == [SYNC_STEP] * BYPASS_STEPS
    versions = [e["weights_version"] for e in requests if e["route"] == "/generate"]
    assert versions == sorted(versions)
    assert set(versions) <= {SYNC_STEP * s for s in range(BYPASS_STEPS + 1)}


def test_bypass_mode_staleness_stays_within_threshold_times_sync_step(bypass_run):
    sampled = _sampled_versions(bypass_run["requests"])
    staleness = []
    for entry in bypass_run["requests"]:
        if entry["route"] == "/forward-backward":
            for row in entry["rollouts"]:
                assert row in sampled, "a trained row the server never generated"
                staleness.append(entry["trainer_version"] - sampled[row])
    assert min(staleness) >= 0 and max(staleness) <= BYPASS_K
    # the second update of a sync trains rows sampled before the first: more than parameter_sync_step=1
    # would ever allow at this threshold (THRESHOLD - 1)
    assert max(staleness) > THRESHOLD - 1, staleness


def test_bypass_mode_logged_its_bound_and_no_is_weights(bypass_run):
    for step in range(1, BYPASS_STEPS + 1):
        metrics = step_metrics(bypass_run["log"], step)
        assert metrics["arctic/weights_version"] == SYNC_STEP * step
        assert metrics["arctic/optimizer_steps"] == SYNC_STEP * step
        assert metrics["actor/async/max_staleness"] == BYPASS_K
        assert 0 <= metrics["actor/async/staleness_max"] <= BYPASS_K
        # old log-probs = the rollout's: no IS weights sent (1 by definition), no old-log-prob entropy
        assert (metrics["actor/async/is_weight_max"], metrics["actor/async/is_weight_clipped_fraction"]) == (
            1,
            0,
        )
        assert "actor/entropy" not in metrics

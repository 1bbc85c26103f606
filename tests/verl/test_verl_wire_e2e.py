"""verl over the wire: verl 0.9.1's real V1 trainer (`python -m adapter_verl.main`, trainer mode
`arctic`) drives `ArcticBackend` with the real arctic-platform 0.1.4 client over HTTP against
`arctic-rl serve --reference` in its own process (the suite's one server, tests/shared/wire_server.py:
default fidelity profile, answers as 0.1.4; the state guard on; every request logged). The runs the
README's verl wire claims rest on.

verl's real layout: the trainer, the rank-0 forwarder worker and the rollout replica are separate
Ray processes, each with its own client object built from the handle (sharing one state record,
`backends/arctic_state.py`); prompts go as text (`ArcticBackend` refuses token ids on-prem).
Rewards are the graded vowel share (tests/shared/learnable_reward.py), so advantages are non-zero.

Two runs, lean (tiny model, 2 prompts x 2 rollouts, 8 tokens):
- colocated (verl's hybrid engine: sleep/wake every step), validation on (`val_before_train`,
  `test_freq=1`), 2 steps, a checkpoint at step 2;
- resumed from that checkpoint for step 3 in the separate layout (verl's standalone rollout pool:
  nothing sleeps), validation off.
Each asserts the exact sleep/wake/sync sequence the server received, the weights version the replica
reports for every generate, and the numbers verl logged."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from verl_e2e_run import (
    REF_LOGPROBS,
    SHUT_DOWN,
    START_UP,
    SYNC_COLOCATED,
    TO_TRAINING,
    control_routes,
    prepare_workdir,
    run_overrides,
    step_metrics,
)

pytest.importorskip("arctic_platform.client")

TRAIN_BATCH, ROLLOUT_N, MAX_RESPONSE, VAL_ROWS = 2, 2, 8, 10
# the weight-sync policy's sequence when separate (nothing sleeps; colocated: verl_e2e_run.SYNC_COLOCATED)
SYNC_SEPARATE = ["weight-sync", "reset-prefix-cache"]
VAL_METRIC = "val-core/bird/acc/mean@1"  # verl's core validation metric of the `bird` data source
RUN_SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    # verl reads config.json and the tokenizer; the server builds the same model from this directory
    return prepare_workdir(tmp_path_factory.mktemp("verl_wire"))


def _overrides(
    root: Path, server, *, colocate: bool, steps: int, validate: bool, extra: tuple[str, ...] = ()
) -> list[str]:
    core = "++remote_backend.core."
    layout = (
        ["actor_rollout_ref.hybrid_engine=true"]
        if colocate
        else [  # verl's standalone rollout pool: sampling on its own (simulated) GPU
            "actor_rollout_ref.hybrid_engine=false",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
        ]
    )
    shape = {"train_batch": TRAIN_BATCH, "rollout_n": ROLLOUT_N, "max_response": MAX_RESPONSE}
    return [
        *run_overrides(root, **shape, steps=steps),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"trainer.val_before_train={str(validate).lower()}",
        f"trainer.test_freq={1 if validate else -1}",
        # validation samples (verl's default is greedy, where the tiny model answers blank lines)
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "trainer.save_freq=2",
        f"trainer.default_local_dir={root / 'ckpt'}",
        f"trainer.rollout_data_dir={root / f'rollouts{steps}'}",
        f"trainer.validation_data_dir={root / f'validation{steps}'}",
        "trainer.resume_mode=auto",
        # verl names the model (actor_rollout_ref.model.path): the server loads that directory
        *server.overrides(core, model=False),
        *layout,
        f"{core}placement.log_prob_gpus=1",  # use_kl_loss: reference log-probs from the log-prob job
        f"{core}zorro.enable=false",  # one prompt x 2 rollouts per micro-batch of 1 row
        f"remote_backend.trace_dir={root / f'trace{steps}'}",
        *extra,
    ]


def _run(root: Path, server, label: str, **kw) -> tuple[str, list[dict]]:
    """One verl run; returns its log and the requests the server received during it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_DEDUP_LOGS": "0"}
    mark = server.request_count()
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "adapter_verl.main", *_overrides(root, server, **kw)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    RUN_SECONDS[label] = time.monotonic() - start
    print(f"\nverl wire run {label}: {RUN_SECONDS[label]:.0f} s", file=sys.stderr)
    log = out.stdout + out.stderr
    (root / f"{label}.log").write_text(log)
    assert out.returncode == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
    assert server.jobs() == {}, "the run left jobs on the server (the trainer shuts its backend down)"
    return log, server.requests(mark)


def _trace(root: Path, steps: int) -> list[dict]:
    from adapter_verl.trace import read_trace

    return read_trace(root / f"trace{steps}")


def _dumped(directory: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (directory / f"{step}.jsonl").read_text().splitlines()]


# verl's Hugging Face config overrides (adapter_verl.model_overrides): the Arctic jobs load a model folder
# made at start-up; the sampler's max_model_len above the tiny model's max_position_embeddings (4096) is
# accepted by the reference server only from a model whose config has the override
OVERRIDDEN = (
    "+actor_rollout_ref.model.override_config.max_position_embeddings=8192",
    "actor_rollout_ref.rollout.max_model_len=8192",
)


@pytest.fixture(scope="module")
def colocated(wire_server, workdir):
    return _run(workdir, wire_server, "colocated", colocate=True, steps=2, validate=True, extra=OVERRIDDEN)


@pytest.fixture(scope="module")
def resumed(wire_server, workdir, colocated):
    # the resumed step trains with verl's GSPO (issue 16's verl case), computed on the server by
    # dotted path (arctic_rl_losses); the checkpoint holds weights and optimizer, not the loss
    return _run(
        workdir,
        wire_server,
        "resumed",
        colocate=False,
        steps=3,
        validate=False,
        extra=("actor_rollout_ref.actor.policy_loss.loss_mode=gspo",),
    )


def test_the_arctic_jobs_load_the_model_folder_with_verls_overrides(workdir, colocated):
    log, requests = colocated
    folder = workdir / "ckpt" / "arctic_model"
    assert f"the Arctic jobs load {folder} (made at start-up" in log
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 8192
    assert json.loads((workdir / "model" / "config.json").read_text())["max_position_embeddings"] == 4096
    assert (folder / "model.safetensors").is_symlink()
    created = [r for r in requests if r["route"] == "/initialize"]
    assert sorted(r["job_type"] for r in created) == ["log_prob", "sampling", "training"]
    assert all(r["status"] == 200 for r in created)


def test_colocated_sleeps_and_wakes_every_step_in_the_policy_order(wire, colocated):
    _, requests = colocated
    routes = control_routes(requests)
    # start-up: the log-prob job sleeps until needed, the replica hands the devices to training,
    # the worker syncs the initial weights (training sleeps again). Then per step: sampling (after
    # the validation before it, on the same awake sampler), the devices to training, log-probs,
    # the update, the sync (verl saves its step-2 checkpoint before it); the last validation.
    start = [*START_UP, "sleep-log-prob", "sleep-inference(2)", *SYNC_COLOCATED]
    step = ["generate", *TO_TRAINING, *REF_LOGPROBS]
    expected = [*start, *step, *SYNC_COLOCATED, *step, "save", *SYNC_COLOCATED, "generate", *SHUT_DOWN]
    assert routes == expected, routes
    # never a generate while inference sleeps, never a sync into a sleeping sampler (the server's
    # state guard would have answered 409, which control_routes refuses)


def test_every_process_holds_its_own_client_and_the_replica_reports_the_synced_version(workdir, colocated):
    trace = _trace(workdir, 2)
    files = sorted(p.name for p in (workdir / "trace2").glob("*.jsonl"))
    roles = {name.split("-")[0]: name.split("-")[1] for name in files}
    assert sorted(roles) == ["rollout0", "worker0"] and roles["rollout0"] != roles["worker0"], files
    # start-up sync, then one after each step's 2 optimizer steps
    assert [r["weights_version"] for r in trace if r["op"] == "update_weights"] == [0, 2, 4]
    generated = [r for r in trace if r["op"] == "generate"]
    rows = TRAIN_BATCH * ROLLOUT_N
    # validation (10 dev prompts), step 1, validation, step 2, validation: each on the weights
    # the worker synced last, as the replica's own client object reports them
    blocks = [VAL_ROWS, rows, VAL_ROWS, rows, VAL_ROWS]
    versions = [0, 0, 2, 2, 4]
    assert len(generated) == sum(blocks)
    cursor = 0
    for size, version in zip(blocks, versions, strict=True):
        assert {r["weights_version"] for r in generated[cursor : cursor + size]} == {version}
        cursor += size
    assert all(r["max_tokens"] == MAX_RESPONSE for r in generated[VAL_ROWS : VAL_ROWS + rows])


def test_colocated_run_learns_from_graded_rewards(workdir, colocated):
    from learnable_reward import vowel_share

    log, _ = colocated
    for step in (1, 2):
        metrics = step_metrics(log, step)
        assert math.isfinite(metrics["actor/loss"]) and metrics["actor/grad_norm"] > 0
        assert max(abs(metrics["critic/advantages/max"]), abs(metrics["critic/advantages/min"])) > 0.1
        # the sync after each step, as verl logged it: 2 optimizer steps per step
        assert metrics["arctic/rollout_weights_version"] == 2 * (step - 1)
        assert metrics["arctic/weights_version"] == 2 * step
        # the sampler's queue since the previous step's end: the validation run after it (for step 1:
        # before training) and this step's rollouts, every request counted once
        assert metrics["sampler_queue/requests"] == VAL_ROWS + TRAIN_BATCH * ROLLOUT_N
        assert 2 <= metrics["sampler_queue/calls"] <= metrics["sampler_queue/requests"]
        assert 0 < metrics["sampler_queue/busy_fraction"] <= 1
        assert metrics["sampler_queue/in_flight_max"] >= metrics["sampler_queue/batch_size_mean"] >= 1
        rows = _dumped(workdir / "rollouts2", step)
        assert len(rows) == TRAIN_BATCH * ROLLOUT_N
        for row in rows:
            assert row["score"] == pytest.approx(vowel_share(row["output"]))
        groups: dict[str, list[float]] = {}
        for row in rows:
            groups.setdefault(row["input"], []).append(row["score"])
        assert len(groups) == TRAIN_BATCH and any(len(set(s)) > 1 for s in groups.values())


def test_validation_runs_before_training_and_after_every_step(workdir, colocated):
    """verl's validation (sampled here, val_kwargs) on the replica; the metric verl logs is the mean
    of the reward function over the generations verl dumped, before training and after each step."""
    from learnable_reward import vowel_share

    log, _ = colocated
    assert "Initial validation metrics" in log, "val_before_train did not run"
    logged = {float(v) for v in re.findall(VAL_METRIC + r"'?:\s*(?:np\.float64\()?([-\d.e]+)", log)}
    means = []
    for step in (0, 1, 2):  # verl's validation dump per global step (0: before training)
        rows = _dumped(workdir / "validation2", step)
        assert len(rows) == VAL_ROWS and all(r["step"] == step for r in rows)
        scores = [vowel_share(r["output"]) for r in rows]
        assert [r["score"] for r in rows] == pytest.approx(scores)
        means.append(sum(scores) / VAL_ROWS)
        assert any(v == pytest.approx(means[-1]) for v in logged), (step, means[-1], logged)
    assert all(m > 0 for m in means), means  # sampled answers hold letters: the metric is not a constant 0


def test_resume_in_the_separate_layout_continues_from_the_checkpoint(wire, workdir, resumed):
    log, requests = resumed
    routes = control_routes(requests)
    # nothing sleeps when not colocated (no job shares devices with another); the restored weights
    # are synced before the first rollout; verl saves its last step before that step's sync
    assert routes == [
        *START_UP,
        "load-checkpoint",
        *SYNC_SEPARATE,
        "generate",
        "save",
        *SYNC_SEPARATE,
        *SHUT_DOWN,
    ], routes
    (load,) = [r for r in requests if r["route"] == "/load-checkpoint"]
    assert load["step"] == 2
    trace = _trace(workdir, 3)
    # the optimizer step counter continues the restored one; versions continue from 4
    assert [r["step"] for r in trace if r["op"] == "step"] == [5, 6]
    assert [r["weights_version"] for r in trace if r["op"] == "update_weights"] == [4, 6]
    assert {r["weights_version"] for r in trace if r["op"] == "generate"} == {4}
    assert re.search(r"(^|\s)step:3 - ", log) and not re.search(r"(^|\s)step:[12] - ", log)
    metrics = step_metrics(log, 3)
    assert (metrics["arctic/rollout_weights_version"], metrics["arctic/weights_version"]) == (4, 6)
    assert math.isfinite(metrics["actor/loss"]) and metrics["actor/grad_norm"] > 0
    # verl's dataloader state came back too: step 3 trains on the third batch of prompts, none of
    # the first two steps' (data.shuffle=false)
    seen = {r["input"] for s in (1, 2) for r in _dumped(workdir / "rollouts2", s)}
    third = {r["input"] for r in _dumped(workdir / "rollouts3", 3)}
    assert len(third) == TRAIN_BATCH and not third & seen


def test_resumed_step_trains_gspo_on_the_server_by_dotted_path(workdir, colocated, resumed):
    """verl's `policy_loss.loss_mode=gspo` through verl's own trainer over the wire: every
    forward-backward names the server loss by dotted path with the gspo family, the server imported it
    (the start-up probe is a no-grad forward naming arctic_rl_losses.server.import_probe) and
    trained with it."""
    from arctic_rl_losses import SERVER_LOSS_FN

    log, requests = resumed
    train = [r for r in _trace(workdir, 3) if r["op"] == "forward_backward"]
    assert len(train) == TRAIN_BATCH  # 2 mini-batches of 1 prompt
    for record in train:
        assert record["processing"]["loss_fn"] == SERVER_LOSS_FN
        assert record["meta"]["policy_loss_config"]["loss_mode"] == "gspo"
    assert sum(1 for r in requests if r["route"] == "/forward-backward") == len(train)
    metrics = step_metrics(log, 3)
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    # no dual clip: the colocated steps (verl's default vanilla = dual clip) report its bound, GSPO does not
    assert "actor/pg_clipfrac_lower" in step_metrics(colocated[0], 2)
    assert "actor/pg_clipfrac_lower" not in metrics

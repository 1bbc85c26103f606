"""Parity trace from verl's own trainer: the canonical scenario through verl 0.9.1's real `run_ppo`
(`python -m adapter_verl.main`, trainer mode `arctic`, verl's separate layout: trainer, rank-0 worker
and rollout replica in their own Ray processes, each with its own client), `ArcticBackend` and the
real arctic-platform 0.1.4 client over HTTP, against `arctic-rl serve --reference --fixed-rollouts
FILE --parity-trace <trace dir>/verl-wire.trace` in its own process. The server serves the
scenario's fixed rollouts (verl's replica sends a group's requests concurrently, so which row gets
which of a group's rollouts depends on arrival: the comparison canonicalises that order) and
records every payload it decodes; tests/parity/test_parity_wire.py compares this trace with SkyRL's.

verl's own settings: `CANONICAL.verl_overrides()` with the backend pointed at the server; the
dataset is the scenario's prompts in step order (verl reads it in order: `data.shuffle=false`)."""

from __future__ import annotations

import sys
import time

import pytest

pytest.importorskip("arctic_platform.client")

from parity_wire_run import (
    assert_served_the_fixed_rollouts,
    assert_trained_on_the_fixed_rollouts,
    parity_server,
    prepare,
)
from verl_e2e_run import run_verl_main

_IN_PROCESS = ("remote_backend.core.backend.", "+remote_backend.core.backend.")
REWARD = "pkg://arctic_rl_core.envs.bird.reward"  # the core BIRD scorer, as SkyRL's `bird` environment


def _write_parquet(rows, path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from arctic_rl_testbed.parity.scenario import dataset_rows
    from arctic_rl_testbed.parity.trace_file import read_trace

    root = tmp_path_factory.mktemp("verl_parity_wire")
    setup = prepare(root, "verl")
    scenario = setup.scenario
    rows = dataset_rows(scenario)
    _write_parquet(rows, root / "train.parquet")
    with parity_server(setup, root) as server:
        overrides = [
            *(o for o in scenario.verl_overrides() if not o.startswith(_IN_PROCESS)),
            f"data.train_files={root / 'train.parquet'}",
            f"data.val_files={root / 'train.parquet'}",
            "data.dataloader_num_workers=0",
            f"actor_rollout_ref.model.path={setup.model_dir}",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={len(rows) // scenario.steps * scenario.rollouts_per_prompt}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={len(rows) // scenario.steps * scenario.rollouts_per_prompt}",
            # verl's separate layout: the standalone rollout pool on its own (simulated) GPU
            "actor_rollout_ref.hybrid_engine=false",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
            "reward.num_workers=1",
            f"reward.custom_reward_function.path={REWARD}",
            "reward.custom_reward_function.name=compute_score",
            "trainer.nnodes=1",
            "trainer.total_epochs=1",
            f"trainer.total_training_steps={scenario.steps}",
            "trainer.logger=[console]",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={root / 'ckpt'}",
            f"trainer.rollout_data_dir={root / 'rollouts'}",
            "ray_kwargs.ray_init.num_cpus=8",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
            *server.overrides("++remote_backend.core.", model=False),
            "++remote_backend.core.placement.log_prob_gpus=1",  # the KL loss's reference log-probs
            "++remote_backend.core.zorro.enable=false",
        ]
        start = time.monotonic()
        returncode, log = run_verl_main(root, overrides, log_name="verl.log", timeout=600)
        seconds = time.monotonic() - start
        print(f"\nverl parity run over the wire ({scenario.steps} steps): {seconds:.0f} s", file=sys.stderr)
        assert returncode == 0, log[-6000:] + "\n--- server ---\n" + server.log_tail()
        assert server.jobs() == {}  # the run destroyed its jobs: the server closed the trace
        assert_served_the_fixed_rollouts(setup, server)
    return setup, root, read_trace(setup.trace)


def test_verl_trains_every_step_on_the_fixed_rollouts(recorded):
    import json

    setup, root, calls = recorded
    assert_trained_on_the_fixed_rollouts(setup, calls)
    # verl's own reward (the core BIRD scorer) of every served rollout equals the scenario's
    for step, rows in enumerate(setup.rollouts, start=1):
        dumped = [json.loads(line) for line in (root / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert sorted(d["score"] for d in dumped) == sorted(r.reward for r in rows)


def test_verl_trace_holds_the_trainers_calls_in_order(recorded):
    setup, _, calls = recorded
    scenario = setup.scenario
    from arctic_rl_losses import IMPORT_PROBE_FN

    # without the loss-import probe `ArcticBackend.from_config` sends first (loss.loss_fn=arctic_rl_core)
    ops = [c.op for c in calls if (c.record.get("processing") or {}).get("loss_fn") != IMPORT_PROBE_FN]
    assert ops[-1] == "weights" and len(calls[-1].record["digest"]) == 64
    mini_batches = scenario.prompts_per_step // scenario.mini_batch_prompts * scenario.epochs
    per_step = ["forward", "forward_ref", *["forward_backward", "step"] * mini_batches]
    assert ops[:-1] == per_step * scenario.steps, ops
    assert [c.record["step"] for c in calls if c.op == "step"] == list(
        range(1, mini_batches * scenario.steps + 1)
    )


def _row_groups(call, rows) -> list[int]:
    """The scenario group (prompt position in the step's dataloader batch) of each row of a payload
    call: the rows sharing a prompt are the group whose fixed rollouts they hold (a response alone
    may not tell: two groups can share a sampled completion)."""
    ids, mask = call.tensors[(0, "input_ids")], call.tensors[(0, "attention_mask")].bool()
    width = int(call.tensors[(0, "prompts")].shape[1])
    prompts = [tuple(ids[b, :width][mask[b, :width]].tolist()) for b in range(ids.shape[0])]
    responses = [tuple(ids[b, width:][mask[b, width:]].tolist()) for b in range(ids.shape[0])]
    by_group = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r.response_ids)
    group_of = {}
    for prompt in dict.fromkeys(prompts):
        held = sorted(resp for p, resp in zip(prompts, responses, strict=True) if p == prompt)
        (group_of[prompt],) = [g for g, resps in by_group.items() if sorted(resps) == held]
    return [group_of[p] for p in prompts]


def test_verl_trains_every_step_in_dataloader_order(recorded):
    """verl's replay buffer hands the rows over in completion order; the adapter's trainer restores the
    dataloader's (adapter_verl.batch_order): every step's forwards hold the groups in dataloader order,
    each group's rows together, and each mini-batch (1 prompt) is one whole group, first to last."""
    setup, _, calls = recorded
    scenario = setup.scenario
    n = scenario.rollouts_per_prompt
    dataloader = [g for g in range(scenario.prompts_per_step) for _ in range(n)]
    forwards = [c for c in calls if c.op == "forward_ref"]
    train = [c for c in calls if c.op == "forward_backward"]
    per_step = scenario.prompts_per_step // scenario.mini_batch_prompts * scenario.epochs
    assert len(forwards) == scenario.steps and len(train) == per_step * scenario.steps
    for step, rows in enumerate(setup.rollouts):
        assert _row_groups(forwards[step], rows) == dataloader, f"step {step}"
        mini_batches = [_row_groups(c, rows) for c in train[step * per_step : (step + 1) * per_step]]
        expected = [[g] * n for g in range(scenario.prompts_per_step)] * scenario.epochs
        assert mini_batches == expected, f"step {step}"

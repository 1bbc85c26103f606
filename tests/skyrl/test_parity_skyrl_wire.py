"""Parity trace from SkyRL's own trainer: the canonical scenario through SkyRL 0.4.0's real
`RayPPOTrainer.train()` (via the adapter, `ArcticPPOExp`), `ArcticBackend` and the real
arctic-platform 0.1.4 client over HTTP, against `arctic-rl serve --reference --fixed-rollouts FILE
--parity-trace <trace dir>/skyrl-wire.trace` in its own process. The server serves the scenario's
fixed rollouts (so SkyRL and verl train on the same ones) and records every payload it decodes; the
parity suite (tests/parity/test_parity_wire.py) compares this trace with verl's.

SkyRL's own settings: `CANONICAL.skyrl_overrides()` with the backend pointed at the server. SkyRL's
train dataloader always shuffles (seeded by `trainer.seed`), so the dataset file is written in the
order SkyRL's own `build_dataloader` reads back as the scenario's step order."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("arctic_platform.client")

from parity_wire_run import (
    assert_served_the_fixed_rollouts,
    assert_trained_on_the_fixed_rollouts,
    parity_server,
    prepare,
)

# the scenario's settings that name the in-process backend: over the wire the server is the backend
_IN_PROCESS = ("trainer.arctic_rl.backend.",)
RUN_SETTINGS = [
    "trainer.enable_ray_gpu_monitor=false",
    "trainer.epochs=1",
    "trainer.eval_interval=0",
    "trainer.eval_before_train=false",
    "trainer.print_example_interval=0",
    "trainer.logger=console",
    "trainer.ckpt_interval=0",
    "trainer.resume_mode=none",
    "data.dataloader.num_workers=0",
    "data.val_data=[]",
    "trainer.arctic_rl.placement.log_prob_gpus=1",  # the KL loss's reference log-probs: the log-prob job
    "trainer.arctic_rl.zorro.enable=false",
]


def skyrl_read_order(cfg, n: int) -> list[int]:
    """The order in which SkyRL's own train dataloader reads the rows of an n-row dataset."""
    from skyrl.train.utils.trainer_utils import build_dataloader

    class Rows(list):
        @staticmethod
        def collate_fn(batch):
            return batch

    return [i for batch in build_dataloader(cfg, Rows(range(n)), is_train=True) for i in batch]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from adapter_skyrl.config import parse_cli
    from arctic_rl_core.backends.arctic import ArcticBackend
    from arctic_rl_testbed.parity.scenario import dataset_rows
    from arctic_rl_testbed.parity.trace_file import read_trace
    from skyrl_e2e_run import logged_steps, run_grpo

    root = tmp_path_factory.mktemp("skyrl_parity_wire")
    setup = prepare(root, "skyrl")
    scenario = setup.scenario
    rows = dataset_rows(scenario)
    base = [o for o in scenario.skyrl_overrides() if not o.startswith(_IN_PROCESS)]
    order = skyrl_read_order(parse_cli([*base, *RUN_SETTINGS]), len(rows))
    in_file = [None] * len(rows)
    for position, index in enumerate(order):
        in_file[index] = rows[position]  # SkyRL reads file row order[k] k-th
    data = root / "parity.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in in_file), encoding="utf-8")
    with parity_server(setup, root) as server:
        start = time.perf_counter()
        exp = run_grpo(
            [
                *server.overrides("trainer.arctic_rl.", model=False),
                f"trainer.policy.model.path={setup.model_dir}",
                f"data.train_data=['{data}']",
                f"trainer.ckpt_path={root / 'ckpt'}",
                f"trainer.export_path={root / 'export'}",
                f"trainer.arctic_rl.checkpoint.path={root / 'server'}",
                *RUN_SETTINGS,
            ],
            base=base,
            backend_factory=ArcticBackend.from_config,
            shutdown=True,
        )
        seconds = time.perf_counter() - start
        print(f"SkyRL parity run over the wire ({scenario.steps} steps): {seconds:.1f} s")
        assert server.jobs() == {}  # the run destroyed its jobs: the server closed the trace
        assert_served_the_fixed_rollouts(setup, server)
    return setup, exp, logged_steps(exp), read_trace(setup.trace)


def test_skyrl_trains_every_step_on_the_fixed_rollouts(recorded):
    setup, exp, steps, calls = recorded
    assert sorted(steps) == list(range(1, setup.scenario.steps + 1))
    assert_trained_on_the_fixed_rollouts(setup, calls)
    # SkyRL's own reward (the `bird` environment, the core scorer) of every served rollout equals
    # the scenario's: the gold row 1.0
    for batch, rows in zip(exp.generator.batches, setup.rollouts, strict=True):
        assert sorted(batch["rewards"]) == sorted(r.reward for r in rows)


def test_skyrl_trace_holds_the_trainers_calls_in_order(recorded):
    setup, _, _, calls = recorded
    scenario = setup.scenario
    from arctic_rl_losses import IMPORT_PROBE_FN

    # without the loss-import probe `ArcticBackend.from_config` sends first (loss.loss_fn=arctic_rl_core)
    ops = [c.op for c in calls if (c.record.get("processing") or {}).get("loss_fn") != IMPORT_PROBE_FN]
    assert ops[-1] == "weights" and len(calls[-1].record["digest"]) == 64
    mini_batches = scenario.prompts_per_step // scenario.mini_batch_prompts * scenario.epochs
    per_step = ["forward_ref", "forward", *["forward_backward", "step"] * mini_batches]
    assert ops[:-1] == per_step * scenario.steps, ops
    assert [c.record["step"] for c in calls if c.op == "step"] == list(
        range(1, mini_batches * scenario.steps + 1)
    )

"""What both adapters' over-the-wire parity runs share (tests/skyrl/test_parity_skyrl_wire.py,
tests/verl/test_parity_verl_wire.py): the scenario's fixed rollouts as a `--fixed-rollouts` file, the
tiny model directory both trainers load, the `arctic-rl serve --reference` that serves those
rollouts and records the parity trace, and the checks of what that server saw."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from parity_trace_checks import trace_dir
from wire_server import WireServer, serve_reference, tiny_model_dir


@dataclass
class ParityWireSetup:
    scenario: object
    rollouts: list  # canonical_rollouts(scenario): per step, the rows every trainer must train on
    model_dir: Path
    fixed_rollouts: Path
    trace: Path  # where the server writes the trace (closed when the run destroys its training job)


def prepare(root: Path, framework: str) -> ParityWireSetup:
    """The scenario's rollouts (sampled once, in process, before any training: fixed data), written
    as the server's `--fixed-rollouts` file, and the model directory both frameworks load."""
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_testbed.parity.scenario import (
        CANONICAL,
        canonical_rollouts,
        fixed_rollouts_document,
        wire_trace_name,
    )
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    scenario = CANONICAL
    engine = ReferenceBackend(
        ReferenceEngineSettings.from_config(ArcticRLConfig.from_dict(scenario.core_config()))
    )
    try:
        rollouts = canonical_rollouts(scenario, engine)
    finally:
        asyncio.run(engine.shutdown())
    path = root / "fixed_rollouts.json"
    path.write_text(json.dumps(fixed_rollouts_document(scenario, rollouts)), encoding="utf-8")
    model_dir = tiny_model_dir(root / "model", scenario.seed, **scenario.reference_model)
    return ParityWireSetup(scenario, rollouts, model_dir, path, trace_dir() / wire_trace_name(framework))


@contextlib.contextmanager
def parity_server(setup: ParityWireSetup, root: Path) -> Iterator[WireServer]:
    """`arctic-rl serve --reference --fixed-rollouts FILE --parity-trace PATH` for one run."""
    log_dir = root / "parity-server"
    args = [
        "--fixed-rollouts", str(setup.fixed_rollouts),
        "--parity-trace", str(setup.trace),
        "--request-log", str(log_dir / "requests.jsonl"),
    ]  # fmt: skip
    with serve_reference(log_dir, args=args, file_root=root) as server:
        yield server


def assert_served_the_fixed_rollouts(setup: ParityWireSetup, server: WireServer) -> None:
    """Every generate was answered from the file, and as many rollouts were served as the file holds:
    the server refuses a prompt's completion beyond its list, so each was served exactly once."""
    generates = [e for e in server.requests() if e["route"] == "/generate"]
    assert generates and all(e["status"] == 200 and e.get("fixed_rollouts") for e in generates), generates
    served = sum(len(e["rollouts"]) for e in generates)
    assert served == sum(len(rows) for rows in setup.rollouts)


def assert_trained_on_the_fixed_rollouts(setup: ParityWireSetup, calls: list) -> None:
    """The forward-backward payloads of step s hold exactly the responses of `rollouts[s]` (as a
    multiset: within a group, which row got which response depends on arrival order)."""
    scenario = setup.scenario
    train = [c for c in calls if c.op == "forward_backward"]
    per_step = scenario.prompts_per_step // scenario.mini_batch_prompts * scenario.epochs
    assert len(train) == per_step * scenario.steps, [c.op for c in calls]
    for step, rows in enumerate(setup.rollouts):
        first_epoch = train[step * per_step : step * per_step + per_step // scenario.epochs]
        sent = []
        for call in first_epoch:
            ids, mask = call.tensors[(0, "input_ids")], call.tensors[(0, "attention_mask")].bool()
            width = int(call.tensors[(0, "prompts")].shape[1])
            sent += [tuple(ids[b, width:][mask[b, width:]].tolist()) for b in range(ids.shape[0])]
        assert sorted(sent) == sorted(r.response_ids for r in rows), f"step {step}"
        advantages = [c.tensors[(0, "advantages")] for c in first_epoch]
        assert all(a.abs().sum() > 0 for a in advantages)  # the gold row of each group: a reward spread

"""Cross-framework parity: SkyRL and verl, driven through their adapters on the canonical scenario
(tests/skyrl/test_parity_skyrl_trace.py, tests/verl/test_parity_verl_trace.py), send the reference
backend the same bytes and end with the same weights.

Compared call by call (after `canonical_order`, which pins the one ordering difference: SkyRL asks
for reference log-probs before the policy's, verl after): the mapped core config, the rollouts
(prompt/response ids, rewards), every forward / forward_backward payload tensor by tensor (input
ids, attention mask, position ids, response/loss masks, advantages, old and reference log-probs)
plus meta and processing, the returned log-prob sums and losses, every optimizer step's grad norm,
learning rate and counter, and the digest of the trainer weights after the last step. All exact
(rtol = 0).

The traces are written by the skyrl and verl suites, which `tests/run.sh` runs before this one.
Run alone, a missing trace skips these tests; with `ARCTIC_RL_PARITY_REQUIRE_TRACES=1` (a full run)
it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from arctic_rl_testbed.parity.scenario import (
    CANONICAL,
    DEFAULT_TRACE_SUBDIR,
    FRAMEWORKS,
    REQUIRE_TRACES_ENV,
    TRACE_DIR_ENV,
    wire_trace_name,
)
from arctic_rl_testbed.parity.trace_diff import canonical_order, diff_traces, format_differences
from arctic_rl_testbed.parity.trace_file import read_trace

REPO_ROOT = Path(__file__).resolve().parents[2]

# No tolerated differences: the one the suite first found (the SkyRL adapter asked for entropy on
# reference-model forwards, verl's worker does not) was fixed in adapter_skyrl.dispatch.forward.


def _trace_paths(*, wire: bool = False) -> dict[str, Path]:
    root = Path(os.environ.get(TRACE_DIR_ENV) or REPO_ROOT / DEFAULT_TRACE_SUBDIR)
    paths = {name: root / (wire_trace_name(name) if wire else f"{name}.trace") for name in FRAMEWORKS}
    missing = [name for name, path in paths.items() if not (path / "calls.jsonl").is_file()]
    if missing:
        message = (
            f"parity trace(s) of {missing} missing under {root}: run the adapter suites first "
            "(bash tests/run.sh skyrl verl parity)"
        )
        if os.environ.get(REQUIRE_TRACES_ENV) == "1":
            pytest.fail(
                message + f"; {REQUIRE_TRACES_ENV}=1 says this is a full run, so a missing trace fails"
            )
        pytest.skip(message)
    return paths


@pytest.fixture(scope="module")
def traces():
    paths = _trace_paths()
    return {name: read_trace(path) for name, path in paths.items()}


def test_skyrl_and_verl_send_identical_payloads_and_learn_identical_weights(traces):
    diffs = diff_traces(traces["skyrl"], traces["verl"])
    assert not diffs, "\n" + format_differences(diffs, ("skyrl", "verl"))


def test_the_comparison_covers_every_payload_field_and_k_steps(traces):
    """The traces are not vacuous: K >= 3 optimizer steps, every wire tensor present and non-trivial."""
    calls = traces["skyrl"]
    steps = [c for c in calls if c.op == "step"]
    assert len({c.record["step"] for c in steps}) >= CANONICAL.steps >= 3
    train = [c for c in calls if c.op == "forward_backward"]
    fields = {name for c in train for (_, name) in c.tensors}
    assert {
        "input_ids", "attention_mask", "prompts", "response_mask", "advantages", "old_log_probs",
        "ref_log_prob",
    } <= fields  # fmt: skip
    # the lean wire: nothing the server does not read (it rebuilds position_ids; verl_grpo reads no loss_mask)
    assert not fields & {"position_ids", "loss_mask"}
    for call in train:
        assert call.tensors[(0, "prompts")].numel() == 0  # [B, P, 0]: only its width travels
        assert call.tensors[(0, "advantages")].abs().sum() > 0
        assert call.tensors[(0, "ref_log_prob")].abs().sum() > 0
    assert [c.op for c in calls][-1] == "weights"


def test_training_outcome_is_identical(traces):
    """Loss of every mini-batch, grad norm of every step and the final weights digest, rtol = 0."""

    def outcome(calls):
        return (
            [c.record["loss"] for c in calls if c.op == "forward_backward"],
            [
                (c.record["grad_norm"], c.record["learning_rate"], c.record["step"])
                for c in calls
                if c.op == "step"
            ],
            [c.record["digest"] for c in calls if c.op == "weights"],
        )

    skyrl, verl = outcome(traces["skyrl"]), outcome(traces["verl"])
    assert skyrl == verl
    losses = skyrl[0]
    assert len(set(losses)) == len(losses)  # every mini-batch really trained on its own data


def test_a_single_changed_value_in_a_real_trace_is_reported_precisely(traces):
    """The comparison of the real traces is not vacuous: one advantage changed in a copy of the verl
    trace is reported as exactly that call, field, index and pair of values."""
    import copy

    calls = copy.deepcopy(traces["verl"])
    target = next(c for c in calls if c.op == "forward_backward")
    advantages = target.tensors[(0, "advantages")]
    row, col = _first_nonzero(advantages)
    original = advantages[row, col].item()
    advantages[row, col] = original + 0.5
    changed = advantages[row, col].item()
    diffs = diff_traces(traces["skyrl"], calls)
    assert len(diffs) == 1
    (d,) = diffs
    assert (d.op, d.field, d.left, d.right) == (
        "forward_backward",
        "batch.0.advantages",
        original,
        changed,
    )
    assert f"first differing index [{row}, {col}], 1 differ" in d.detail


def _first_nonzero(values) -> tuple[int, int]:
    import torch

    row, col = torch.nonzero(values)[0].tolist()
    return int(row), int(col)


# ------------------------------------------------------------------------------------------------
# From the trainers themselves, over the wire: SkyRL's RayPPOTrainer.train() and verl's run_ppo, each
# through ArcticBackend and the real 0.1.4 client, against `serve --reference --fixed-rollouts
# --parity-trace` (tests/skyrl/test_parity_skyrl_wire.py, tests/verl/test_parity_verl_wire.py).
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wire_traces():
    paths = _trace_paths(wire=True)
    return {name: read_trace(path) for name, path in paths.items()}


def _until_first_update(calls):
    """The calls before the first forward-backward: the loss-import probe and step 1's old and
    reference log-prob forwards, all computed on the initial weights."""
    first = next(i for i, c in enumerate(calls) if c.op == "forward_backward")
    return calls[:first]


def _groups(call) -> list[tuple[int, ...]]:
    """The prompt token ids of each row of a payload call, in row order."""
    ids, mask = call.tensors[(0, "input_ids")], call.tensors[(0, "attention_mask")].bool()
    width = int(call.tensors[(0, "prompts")].shape[1])
    return [tuple(ids[b, :width][mask[b, :width]].tolist()) for b in range(ids.shape[0])]


def test_the_real_trainers_send_identical_payloads_at_every_call(wire_traces):
    """Every call of the two real trainers' runs, bit for bit, after the two canonicalisations (no-grad
    forward order; rows within a GRPO group): the probe and step 1's forwards on the initial weights
    (each framework's dataloader order, chat templating and tokenisation, the fixed rollouts), and past
    the first optimizer update every later step's old / reference log-prob forwards with their per-row
    log-prob sums (computed on the weights both trainers' updates produced), every forward-backward
    payload (its rows, advantages, old / reference log-probs) with its loss, and every optimizer step's
    grad norm, learning rate and counter. verl's rows are in dataloader order (adapter_verl.batch_order;
    stock verl trains them in completion order), so its mini-batches hold the same rows as SkyRL's."""
    skyrl, verl = wire_traces["skyrl"], wire_traces["verl"]
    assert [c.op for c in canonical_order(_until_first_update(skyrl))] == [
        "forward",
        "forward",
        "forward_ref",
    ]
    diffs = diff_traces(skyrl, verl, canonical_rows=True)
    assert not diffs, "\n" + format_differences(diffs, ("skyrl", "verl"))
    ops = [c.op for c in verl]
    per_step = CANONICAL.prompts_per_step // CANONICAL.mini_batch_prompts * CANONICAL.epochs
    assert ops.count("forward_backward") == ops.count("step") == per_step * CANONICAL.steps
    assert ops.count("forward_ref") == CANONICAL.steps  # every step's reference forward is compared


def test_the_real_trainers_end_with_the_same_weights(wire_traces):
    """The trainer weights' digest the server took when each run destroyed its training job, after
    K GRPO steps of both real trainers: identical, and every mini-batch trained on its own data."""
    digests = {
        name: [c.record["digest"] for c in calls if c.op == "weights"] for name, calls in wire_traces.items()
    }
    assert len(digests["skyrl"]) == 1 and len(digests["skyrl"][0]) == 64
    assert digests["skyrl"] == digests["verl"]
    losses = [c.record["loss"] for c in wire_traces["verl"] if c.op == "forward_backward"]
    assert len(set(losses)) == len(losses)
    grad_norms = [c.record["grad_norm"] for c in wire_traces["verl"] if c.op == "step"]
    assert all(g > 0 for g in grad_norms) and len(set(grad_norms)) == len(grad_norms)


def test_every_mini_batch_is_one_prompt_group_so_the_order_within_it_changes_no_bit(wire_traces):
    """Why the comparison may put a group's rows in one order and still be bit for bit: in both
    traces every forward-backward holds exactly one GRPO group (mini-batch = 1 prompt) of 2 rows, and
    the server trains one row per micro-batch (the scenario's micro_batch_size_per_gpu = 1), so the
    mini-batch's gradient and loss are each ONE float addition of two per-row terms, which commutes
    exactly. With 3+ rows per group, or several rows per micro-batch, the order of a group's rows (which
    of a group's identical requests reached the server first) would move last bits and this comparison
    would need a float tolerance."""
    assert CANONICAL.rollouts_per_prompt == 2 and CANONICAL.mini_batch_prompts == 1
    assert CANONICAL.core_config()["batch"]["micro_batch_size_per_gpu"] == 1
    for name, calls in wire_traces.items():
        train = [c for c in calls if c.op == "forward_backward"]
        for call in train:
            groups = _groups(call)
            assert len(groups) == CANONICAL.rollouts_per_prompt and len(set(groups)) == 1, name
        # each step's two mini-batches are its two groups, in the step's dataloader order
        forwards = [c for c in calls if c.op == "forward_ref"]
        per_step = CANONICAL.prompts_per_step // CANONICAL.mini_batch_prompts * CANONICAL.epochs
        for step, forward in enumerate(forwards):
            rows = _groups(forward)
            in_order = list(dict.fromkeys(rows))
            assert rows == [g for g in in_order for _ in range(CANONICAL.rollouts_per_prompt)], (name, step)
            mini_batches = [_groups(c)[0] for c in train[step * per_step : (step + 1) * per_step]]
            assert mini_batches == in_order * CANONICAL.epochs, (name, step)


def test_the_wire_comparison_is_not_vacuous(wire_traces):
    """One response token changed in a copy of verl's trace before the first update, and one last bit
    of a grad norm after it, are each reported as that call and field, though rows within a group may
    be reordered."""
    import copy
    import math

    calls = copy.deepcopy(wire_traces["verl"])
    target = next(c for c in calls if c.op == "forward_ref")
    ids, mask = target.tensors[(0, "input_ids")], target.tensors[(0, "attention_mask")].bool()
    column = int(mask[0].nonzero()[-1])  # the last real token of row 0: a response token
    ids[0, column] += 1
    last_step = [c for c in calls if c.op == "step"][-1]
    last_step.record["grad_norm"] = math.nextafter(last_step.record["grad_norm"], math.inf)
    diffs = diff_traces(wire_traces["skyrl"], calls, canonical_rows=True)
    assert [(d.op, d.field) for d in diffs] == [
        ("forward_ref", "batch.0.input_ids"),
        ("step", "grad_norm"),
    ], diffs

"""The payload layout checked against the installed arctic-platform 0.1.4 server code.

The server's training stack (DeepSpeed, Ray, ...) is not installed here, so its modules cannot
be imported whole; instead the pure functions the server applies to a request are extracted
from the installed source files with `ast` and executed as they are: the unpad/pad helpers and
`apply_temperature_post` of `rl/processors/pipeline.py`, and the `verl_grpo` loss of
`integrations/verl/grpo_loss.py`. Only the model is a toy (a causal, position-aware logit
table) and the log-softmax/gather of `compute_entropy_and_logprobs` is written out.

If old log-probs are placed where the server's loss expects them, a train step right after the
forward sees ratio == 1 exactly (zero PPO-KL, no clipping) and the loss equals -mean(A).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)

arctic_platform = pytest.importorskip("arctic_platform")
ROOT = Path(arctic_platform.__file__).parent
PIPELINE = ROOT / "rl" / "processors" / "pipeline.py"
GRPO_LOSS = ROOT / "integrations" / "verl" / "grpo_loss.py"
if not PIPELINE.exists() or not GRPO_LOSS.exists():
    pytest.skip("arctic-platform server sources are not installed", allow_module_level=True)

VOCAB = 32
PAD = 3  # a visible pad id: the server fills padded log-prob slots with this value


def _extract(path: Path, names: set[str]) -> dict[str, Any]:
    """Execute the named top-level functions/classes of an installed source file, undecorated."""
    tree = ast.parse(path.read_text())
    nodes = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            node.decorator_list = []
            nodes.append(node)
    found = {node.name for node in nodes}
    assert found == names, f"{path.name} no longer defines {sorted(names - found)}"
    namespace: dict[str, Any] = {
        "torch": torch,
        "Any": Any,
        "Optional": Optional,
        "pr0": lambda *a, **k: None,
        "see_memory_usage": lambda *a, **k: None,
    }
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


BATCH = ROOT / "common" / "utils" / "batch.py"
SERVER_MODELS = ROOT / "common" / "utils" / "server_models.py"


def _extract_batch_code() -> dict[str, Any]:
    """The server's batch splitting (`common/utils/batch.py`: `_split_batch`, `split_dict`, the
    position-id rebuild) with its `BATCH_DIM_CONTEXT_KEYS`, as installed."""
    tree = ast.parse(BATCH.read_text())
    nodes = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in BATCH_FUNCTIONS)
        or (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "BATCH_DIM_CONTEXT_KEYS" for t in node.targets)
        )
    ]
    namespace = _extract(SERVER_MODELS, {"resolve_parallelism_degree"})
    namespace["Integral"] = __import__("numbers").Integral
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(BATCH), "exec"), namespace)
    missing = BATCH_FUNCTIONS - set(namespace)
    assert not missing, f"batch.py no longer defines {sorted(missing)}"
    return namespace


BATCH_FUNCTIONS = {
    "dp_sp_world_size",
    "promote_batch_dim_to_batch",
    "unpack_batch",
    "_split_value",
    "split_dict",
    "reconstruct_position_ids_",
    "_split_batch",
}

SERVER = _extract(
    PIPELINE,
    {
        "compute_packing_info_for_batch",
        "padded_tensor_2d_to_unpadded_tensor_1d",
        "padded_tensor_2d_dict_to_unpadded_tensor_1d_dict",
        "unpadded_tensor_1d_to_padded_tensor_2d",
        "unpadded_tensor_1d_dict_to_padded_tensor_2d_dict",
        "padded_tensor_2d_full_to_unpadded_tensor_1d_response",
        "unpadded_tensor_1d_response_to_padded_tensor_2d_full",
        "apply_temperature_post",
    },
) | _extract(
    GRPO_LOSS,
    {
        "mask_and_pad_for_log_probs",
        "shift_log_probs_left",
        "masked_sum",
        "masked_mean",
        "agg_loss",
        "compute_policy_loss_vanilla",
        "kl_penalty",
        "kl_penalty_forward",
        "VerlPolicyConfig",
        "verl_grpo_loss",
    },
)


SERVER_BATCH = _extract_batch_code()


class ToyCausalLM:
    """logits(t) = W[token t] + U[position t] + V[token t-1]: causal and position dependent."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.W = torch.randn(VOCAB, VOCAB, generator=g)
        self.U = torch.randn(64, VOCAB, generator=g)
        self.V = torch.randn(VOCAB, VOCAB, generator=g)

    def logits(self, ids_1d: torch.Tensor, pos_1d: torch.Tensor) -> torch.Tensor:
        previous = torch.roll(ids_1d, 1)
        # the previous token only counts inside a sequence (position > 0)
        carry = (pos_1d > 0).unsqueeze(-1).to(torch.float32)
        return (self.W[ids_1d] + self.U[pos_1d] + carry * self.V[previous]).unsqueeze(0)  # [1, T, V]


def _server_forward(model: ToyCausalLM, payload, *, zorro: bool):
    """What the server's run_pipeline does to a [B, S] batch (pack=False path of the worker)."""
    batch = {k: v.clone() for k, v in payload.batch.items()}
    meta = {"dp_size": 1, **payload.meta}  # the server's split injects dp_size
    batch = SERVER["compute_packing_info_for_batch"](batch)
    mask_2d = batch["attention_mask"].bool()
    # model inputs are the packed real tokens in both modes (ZoRRo dedups prompts, same math)
    ids_1d = batch["input_ids"][mask_2d]
    pos_1d = batch["position_ids"][mask_2d]
    outputs = {"logits": model.logits(ids_1d, pos_1d)}
    if "apply_temperature" in payload.processing["post"]:
        SERVER["apply_temperature_post"](outputs, batch, meta, "cpu")
    labels = torch.roll(ids_1d, shifts=-1, dims=-1).unsqueeze(0)
    logprobs_1d = (
        torch.log_softmax(outputs["logits"].float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    )
    P = meta["max_prompt_len"]
    if zorro:
        # ZoRRo's model returns response-aligned log-probs (log p(token) at the token itself)
        shifted_2d = SERVER["unpadded_tensor_1d_to_padded_tensor_2d"](logprobs_1d, mask_2d, 0.0)
        aligned_2d = torch.roll(shifted_2d, shifts=1, dims=1)
        response_1d = aligned_2d[:, P:][mask_2d[:, P:]].unsqueeze(0)
        for key in [k for k in batch if k not in ("input_ids", "position_ids", "attention_mask")]:
            if batch[key].shape == mask_2d.shape:
                batch[key] = SERVER["padded_tensor_2d_full_to_unpadded_tensor_1d_response"](
                    batch[key], mask_2d, P
                )
        returned = SERVER["unpadded_tensor_1d_response_to_padded_tensor_2d_full"](response_1d, mask_2d, P)
        return response_1d, batch, meta, returned
    batch = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](batch, mask_2d)
    returned = SERVER["unpadded_tensor_1d_dict_to_padded_tensor_2d_dict"](
        {"logprobs": logprobs_1d.clone()}, mask_2d, meta["pad_token_id"]
    )["logprobs"]
    return logprobs_1d, batch, meta, returned


def _server_train_step(model: ToyCausalLM, payload, *, zorro: bool) -> tuple[float, dict]:
    logprobs_1d, batch, meta, _ = _server_forward(model, payload, zorro=zorro)
    loss, metrics = SERVER["verl_grpo_loss"]({"logprobs": logprobs_1d}, batch, meta, {}, "cpu")
    return float(loss), metrics


def _samples() -> list[RolloutSample]:
    g = torch.Generator().manual_seed(1)
    shapes = [(2, 4), (5, 1), (3, 3), (1, 2)]  # (prompt len, response len)
    out = []
    for i, (lp, lr) in enumerate(shapes):
        prompt = torch.randint(4, VOCAB, (lp,), generator=g).tolist()
        response = torch.randint(4, VOCAB, (lr,), generator=g).tolist()
        out.append(RolloutSample(prompt, response, advantages=[0.5, -1.0, 1.5, -0.25][i]))
    return out


def _spec(**overrides) -> PayloadSpec:
    settings = dict(pad_token_id=PAD, max_prompt_len=5, max_response_len=4, rollout_n=2, temperature=0.7)
    return PayloadSpec(**(settings | overrides))


def _expected_token_logprobs(model: ToyCausalLM, sample: RolloutSample, temperature: float) -> list[float]:
    ids = torch.tensor(list(sample.prompt_ids) + list(sample.response_ids))
    logits = model.logits(ids, torch.arange(len(ids)))[0] / temperature
    logp = torch.log_softmax(logits, dim=-1)
    P = len(sample.prompt_ids)
    return [float(logp[P + j - 1, ids[P + j]]) for j in range(len(sample.response_ids))]


def test_forward_output_is_shifted_and_response_logprobs_reads_it_back():
    model, spec, samples = ToyCausalLM(), _spec(), _samples()
    payload = build_forward_payload(samples, spec)
    _, _, _, returned_B_S = _server_forward(model, payload, zorro=False)

    # padding slots hold the pad id's value; response token j sits at column P + j - 1
    assert bool((returned_B_S[payload.batch["attention_mask"] == 0] == float(PAD)).all())
    values_B_R, mask_B_R = response_logprobs(returned_B_S, payload, spec)
    for b, sample in enumerate(samples):
        n = len(sample.response_ids)
        assert mask_B_R[b].tolist() == [True] * n + [False] * (spec.max_response_len - n)
        torch.testing.assert_close(
            values_B_R[b, :n],
            torch.tensor(_expected_token_logprobs(model, sample, spec.temperature)),
            rtol=0,
            atol=1e-6,
        )
        assert values_B_R[b, n:].abs().sum() == 0


@pytest.mark.parametrize("zorro", [False, True], ids=["packed", "zorro"])
def test_server_grpo_loss_sees_ratio_one_right_after_the_forward(zorro: bool):
    model, spec, samples = ToyCausalLM(), _spec(zorro_train_enable=zorro), _samples()
    forward = build_forward_payload(samples, spec)
    _, _, _, returned_B_S = _server_forward(model, forward, zorro=zorro)
    old_B_R, _ = response_logprobs(returned_B_S, forward, spec)
    train = build_train_payload(with_response_logprobs(samples, old_B_R, field="old_logprobs"), spec)

    loss, metrics = _server_train_step(model, train, zorro=zorro)

    tokens = sum(len(s.response_ids) for s in samples)
    assert train.meta["batch_num_tokens"] == tokens
    assert metrics["actor/ppo_kl.sum"] == 0.0
    assert metrics["actor/pg_clipfrac.sum"] == 0.0
    advantage_sum = sum(float(s.advantages) * len(s.response_ids) for s in samples)
    assert loss == pytest.approx(-advantage_sum / tokens, rel=1e-6)


def test_old_logprobs_one_column_early_would_break_the_ratio():
    """Negative control: the naive 'same column as the forward output' placement (P + j - 1)."""
    model, spec, samples = ToyCausalLM(), _spec(), _samples()
    forward = build_forward_payload(samples, spec)
    _, _, _, returned_B_S = _server_forward(model, forward, zorro=False)
    old_B_R, _ = response_logprobs(returned_B_S, forward, spec)
    train = build_train_payload(with_response_logprobs(samples, old_B_R, field="old_logprobs"), spec)
    early = dataclasses.replace(train, batch=dict(train.batch))
    early.batch["old_log_probs"] = torch.roll(train.batch["old_log_probs"], shifts=-1, dims=1)

    _, metrics = _server_train_step(model, early, zorro=False)
    assert abs(metrics["actor/ppo_kl.sum"]) > 1e-3


def test_forward_without_temperature_would_break_the_ratio():
    """Why both payloads apply the temperature: old log-probs without it (upstream verl's bug)."""
    model, spec, samples = ToyCausalLM(), _spec(), _samples()
    forward = build_forward_payload(samples, spec)
    cold = dataclasses.replace(
        forward, processing={"post": ["compute_entropy_and_logprobs"], "loss_fn": None}
    )
    _, _, _, returned_B_S = _server_forward(model, cold, zorro=False)
    old_B_R, _ = response_logprobs(returned_B_S, forward, spec)
    train = build_train_payload(with_response_logprobs(samples, old_B_R, field="old_logprobs"), spec)

    _, metrics = _server_train_step(model, train, zorro=False)
    assert abs(metrics["actor/ppo_kl.sum"]) > 1e-3


# ----------------------------------------------------------------------------------------------
# The lean wire through the server's own codec, batch split and pipeline
# ----------------------------------------------------------------------------------------------


def _long_tailed_samples(n_groups: int = 4, rollouts: int = 2) -> list[RolloutSample]:
    """Whole groups (ZoRRo needs them); lengths well below the spec's maxima of 9 / 8."""
    g = torch.Generator().manual_seed(7)
    out = []
    for group in range(n_groups):
        prompt = torch.randint(4, VOCAB, (1 + group % 3,), generator=g).tolist()
        for r in range(rollouts):
            response = torch.randint(4, VOCAB, (1 + (group + r) % 3,), generator=g).tolist()
            out.append(RolloutSample(prompt, response, advantages=float(group - r) / 2))
    return out


def _lean_spec(**overrides) -> PayloadSpec:
    settings = dict(
        pad_token_id=PAD,
        max_prompt_len=9,
        max_response_len=8,
        rollout_n=2,
        temperature=0.7,
        pad_to_multiple=2,
        drop_position_ids=True,
        dp_size=2,
        grad_accum_steps=2,
    )
    return PayloadSpec(**(settings | overrides))


def _through_server_split(payload, spec: PayloadSpec) -> list[WirePayload]:
    """DSSST1 round trip (the real codec), `_split_batch` across dp_size workers, then the worker's
    `split_dict` into grad_accum_steps micro-batches: what each `run_pipeline` call receives."""
    from arctic_platform import wire

    body = {"batch": payload.batch, "meta": payload.meta, "processing": payload.processing}
    decoded = wire.loads(wire.dumps(body))
    shards, reorder = SERVER_BATCH["_split_batch"](decoded, spec.dp_size)
    assert reorder is None and len(shards) == spec.dp_size
    micro = []
    for shard in shards:
        assert shard["meta"]["dp_size"] == spec.dp_size
        for mb in SERVER_BATCH["split_dict"](shard["batch"], spec.grad_accum_steps):
            micro.append(WirePayload(batch=mb, meta=shard["meta"], processing=shard["processing"]))
    return micro


def test_lean_payload_is_narrow_and_sends_nothing_the_server_does_not_read():
    spec, samples = _lean_spec(), _long_tailed_samples()
    train = build_train_payload(
        [dataclasses.replace(s, old_logprobs=[-1.0] * len(s.response_ids)) for s in samples], spec
    )
    longest_prompt = max(len(s.prompt_ids) for s in samples)  # 3 -> 4 (multiple of 2)
    longest_response = max(len(s.response_ids) for s in samples)  # 3 -> 4
    assert train.meta["max_prompt_len"] == 4 and train.meta["max_response_len"] == 4
    assert longest_prompt == 3 and longest_response == 3
    assert {k: (tuple(v.shape), str(v.dtype)) for k, v in train.batch.items()} == {
        "input_ids": ((8, 8), "torch.int64"),
        "attention_mask": ((8, 8), "torch.bool"),
        "prompts": ((8, 4, 0), "torch.bool"),
        "response_mask": ((8, 8), "torch.bool"),
        "advantages": ((8, 8), "torch.float32"),
        "old_log_probs": ((8, 8), "torch.float32"),
    }
    # ZoRRo: the patched model was built with max_response_len, so only the prompt width shrinks
    zorro = build_train_payload(
        train_samples := [dataclasses.replace(s, old_logprobs=[-1.0] * len(s.response_ids)) for s in samples],
        _lean_spec(zorro_train_enable=True),
    )
    assert zorro.meta["max_prompt_len"] == 4 and zorro.meta["max_response_len"] == 8
    # a loss the wire does not know gets every per-token field; KL adds the reference
    from arctic_rl_losses.names import SERVER_LOSS_FN
    from arctic_rl_losses.server import PER_TOKEN_INPUTS

    ours = build_train_payload(train_samples, _lean_spec(loss_fn=SERVER_LOSS_FN))
    assert set(ours.batch) - {"input_ids", "attention_mask", "prompts"} <= set(PER_TOKEN_INPUTS)
    other = build_train_payload(train_samples, _lean_spec(loss_fn="my_pkg.losses.custom"))
    assert {"loss_mask"} <= set(other.batch) and torch.equal(
        other.batch["loss_mask"], other.batch["response_mask"]
    )
    assert (
        other.batch["loss_mask"].untyped_storage().data_ptr()
        != other.batch["response_mask"].untyped_storage().data_ptr()
    )
    with_ref = [dataclasses.replace(s, ref_logprobs=[-2.0] * len(s.response_ids)) for s in train_samples]
    assert "ref_log_prob" not in build_train_payload(with_ref, spec).batch  # verl_grpo reads it only with KL
    assert "ref_log_prob" in build_train_payload(with_ref, _lean_spec(use_kl_loss=True)).batch


def test_server_rebuilds_the_dropped_position_ids_exactly():
    spec, samples = _lean_spec(), _long_tailed_samples()
    lean = build_forward_payload(samples, spec)
    sent = build_forward_payload(samples, dataclasses.replace(spec, drop_position_ids=False))
    assert "position_ids" not in lean.batch and lean.meta["drop_position_ids"] is True
    rebuilt = torch.cat([mb.batch["position_ids"] for mb in _through_server_split(lean, spec)])
    assert torch.equal(rebuilt, sent.batch["position_ids"])


@pytest.mark.parametrize("zorro", [False, True], ids=["packed", "zorro"])
def test_lean_payloads_through_the_server_split_give_ratio_one_and_the_exact_loss(zorro: bool):
    """Forward -> old log-probs -> train, every payload lean, DP=2 x GAS=2 split by the server's
    code: the loss summed over the four micro-batches (each normalised globally, dp_size=2) and
    averaged over the two ranks is -mean(A) with ratio 1."""
    model, spec, samples = ToyCausalLM(), _lean_spec(zorro_train_enable=zorro), _long_tailed_samples()
    forward = build_forward_payload(samples, spec)
    returned = torch.cat(
        [_server_forward(model, mb, zorro=zorro)[3] for mb in _through_server_split(forward, spec)]
    )
    old_B_R, mask_B_R = response_logprobs(returned, forward, spec)
    assert old_B_R.shape == (len(samples), spec.max_response_len)  # the spec's width, whatever was sent
    for b, sample in enumerate(samples):
        n = len(sample.response_ids)
        torch.testing.assert_close(
            old_B_R[b, :n],
            torch.tensor(_expected_token_logprobs(model, sample, spec.temperature)),
            rtol=0,
            atol=1e-6,
        )
        assert mask_B_R[b].tolist() == [True] * n + [False] * (spec.max_response_len - n)
    train = build_train_payload(with_response_logprobs(samples, old_B_R, field="old_logprobs"), spec)
    total, kl = 0.0, 0.0
    for mb in _through_server_split(train, spec):
        loss, metrics = _server_train_step(model, mb, zorro=zorro)
        total += loss
        kl += metrics["actor/ppo_kl.sum"]
    tokens = sum(len(s.response_ids) for s in samples)
    advantage_sum = sum(float(s.advantages) * len(s.response_ids) for s in samples)
    assert kl == 0.0
    assert total / spec.dp_size == pytest.approx(-advantage_sum / tokens, rel=1e-6)


def test_server_split_refuses_sequence_parallelism():
    """0.1.4 cannot serve Ulysses SP > 1: why the config rejects it for Arctic backends."""
    payload = build_forward_payload(_long_tailed_samples(), _lean_spec())
    body = {"batch": payload.batch, "meta": payload.meta, "processing": payload.processing}
    with pytest.raises(ValueError, match="sequence-parallel data-plane is not implemented"):
        SERVER_BATCH["_split_batch"](body, 2, sp_size=2)

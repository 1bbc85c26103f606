"""The dotted-path loss as the arctic-platform 0.1.4 server calls it, against the same loss on rows.

The server's training stack is not installed on CPU, so its pure request-handling functions are
taken from the installed wheel's sources (`ast`, undecorated) and run as they are: the registry's
`resolve_fn` (imported for real: `arctic_platform.common.registry`), and `compute_packing_info_for_batch`
and the `[B, S]` -> `[1, T]` unpadding of `rl/processors/pipeline.py`. Only the model is a stand-in
(given log-probs). The loss the server resolves from `SERVER_LOSS_FN` must equal
`arctic_rl_losses.policy.actor_loss` on response rows bit for bit, loss and gradient, for every
family; and the reference engine must hand a dotted-path loss exactly the layout the server builds.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload
from arctic_rl_losses import LOSS_AGG_MODES, POLICY_LOSSES, SERVER_LOSS_FN
from arctic_rl_losses.policy import GlobalCounts, actor_loss
from arctic_rl_losses.settings import LossSettings
from arctic_rl_testbed.reference.pipeline import PostOutputs, server_layout
from arctic_rl_testbed.reference.validation import MicroBatch, parse_payload

arctic_platform = pytest.importorskip("arctic_platform")
from arctic_platform.common.registry import LOSS_FNS, resolve_fn  # noqa: E402

PIPELINE = Path(arctic_platform.__file__).parent / "rl" / "processors" / "pipeline.py"
P, R, PAD = 4, 5, 3


def _extract(path: Path, names: set[str]) -> dict[str, Any]:
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in nodes} == names, f"{path.name} no longer defines {sorted(names)}"
    for node in nodes:
        node.decorator_list = []
    namespace: dict[str, Any] = {"torch": torch, "pr0": lambda *a, **k: None}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


SERVER = _extract(
    PIPELINE,
    {
        "compute_packing_info_for_batch",
        "padded_tensor_2d_to_unpadded_tensor_1d",
        "padded_tensor_2d_dict_to_unpadded_tensor_1d_dict",
        "padded_tensor_2d_full_to_unpadded_tensor_1d_response",
    },
)


def _samples(seed: int) -> list[RolloutSample]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 5), (4, 1), (3, 3), (1, 4), (4, 5), (2, 2)]
    out = []
    for lp, lr in shapes:
        old = (-3 * torch.rand(lr, generator=g)).tolist()
        out.append(
            RolloutSample(
                prompt_ids=torch.randint(4, 30, (lp,), generator=g).tolist(),
                response_ids=torch.randint(4, 30, (lr,), generator=g).tolist(),
                response_mask=[1] * (lr - 1) + [int(lr % 2)] if lr > 1 else [1],
                advantages=torch.randn(lr, generator=g).tolist(),
                old_logprobs=old,
                ref_logprobs=(torch.tensor(old) + 0.3 * torch.randn(lr, generator=g)).clamp(max=0).tolist(),
                rollout_is_weights=(0.5 + torch.rand(lr, generator=g)).tolist(),
            )
        )
    return out


def _spec(family: str, mode: str) -> PayloadSpec:
    return PayloadSpec(
        pad_token_id=PAD,
        max_prompt_len=P,
        max_response_len=R,
        rollout_n=2,
        temperature=1.0,
        calculate_entropy=True,
        loss_fn=SERVER_LOSS_FN,
        policy_loss=family,
        clip_ratio_high=0.28,
        loss_agg_mode=mode,
        use_kl_loss=True,
        kl_loss_coef=0.05,
        kl_loss_type="k3",
        entropy_coeff=0.01,
        policy_loss_params=(("clip_cov_ratio", 0.3), ("kl_cov_ratio", 0.3)) if "cov" in family else (),
    )


def _model_outputs(payload, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stand-in model: shifted log-probs and entropy `[B, S]` (position i: the distribution of token i+1)."""
    g = torch.Generator().manual_seed(100 + seed)
    shape = payload.batch["input_ids"].shape
    return -2 * torch.rand(shape, generator=g), torch.rand(shape, generator=g)


def _rows(payload, values_B_S: torch.Tensor, *, shifted: bool) -> torch.Tensor:
    """Response-aligned `[B, R]` from `[B, S]` (the token-aligned request layout, or shifted outputs)."""
    start = P - 1 if shifted else P
    return values_B_S[:, start : start + R]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("family", POLICY_LOSSES)
def test_server_resolved_loss_equals_the_row_loss(family, mode):
    payload = build_train_payload(_samples(0), _spec(family, mode))
    lp_B_S, entropy_B_S = _model_outputs(payload, 0)
    lp_B_S.requires_grad_(True)

    # the server: resolve the dotted path, build packing info, unpad by attention_mask, call
    fn = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)
    batch = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    mask_2d = batch["attention_mask"].bool()
    batch = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](batch, mask_2d)
    outputs = {"logprobs": lp_B_S[mask_2d].unsqueeze(0), "entropy": entropy_B_S[mask_2d].unsqueeze(0)}
    meta = dict(payload.meta, dp_size=2)
    torch.manual_seed(0)
    server_loss, server_metrics = fn(outputs, batch, meta, {}, "cpu")
    server_loss.backward()
    server_grad = lp_B_S.grad.clone()

    # the same loss on response rows
    lp_B_S.grad = None
    response = payload.batch["response_mask"].bool() & (torch.arange(R + P) >= P)
    mask_B_R = _rows(payload, response.to(torch.int64), shifted=False).bool()
    settings = LossSettings.from_meta(payload.meta["actor_config"], payload.meta["policy_loss_config"])
    counts = GlobalCounts(2, payload.meta["batch_num_tokens"], payload.meta["global_batch_size"])
    torch.manual_seed(0)
    lengths = payload.batch["attention_mask"][:, P:].sum(dim=1)
    width = int(lengths.max())
    row = lambda key: _rows(payload, payload.batch[key], shifted=False)[:, :width]  # noqa: E731
    row_loss, row_metrics = actor_loss(
        settings,
        counts,
        _rows(payload, lp_B_S, shifted=True)[:, :width],
        row("old_log_probs"),
        row("advantages"),
        mask_B_R[:, :width],
        entropy_B_R=_rows(payload, entropy_B_S, shifted=True)[:, :width],
        ref_logprobs_B_R=row("ref_log_prob"),
        rollout_is_weights_B_R=row("rollout_is_weights"),
    )
    row_loss.backward()

    torch.testing.assert_close(server_loss, row_loss, rtol=0, atol=0)
    torch.testing.assert_close(server_grad, lp_B_S.grad, rtol=0, atol=0)
    assert server_metrics == row_metrics
    assert server_grad.abs().sum() > 0 and (server_grad[~mask_2d] == 0).all()


def test_rows_see_real_sequences_unlike_the_builtin_packed_row():
    """seq-mean-token-mean over rows is not the packed micro-batch's token mean (the built-in's result)."""
    payload = build_train_payload(_samples(1), _spec("dual_clip", "seq-mean-token-mean"))
    lp_B_S, _ = _model_outputs(payload, 1)
    batch = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    mask_2d = batch["attention_mask"].bool()
    batch = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](batch, mask_2d)
    meta = dict(payload.meta, dp_size=1, actor_config={**payload.meta["actor_config"], "entropy_coeff": 0.0})
    seq, _ = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)(
        {"logprobs": lp_B_S[mask_2d][None]}, batch, meta, {}, "cpu"
    )
    tokens = {**meta, "actor_config": {**meta["actor_config"], "loss_agg_mode": "token-mean"}}
    token, _ = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)(
        {"logprobs": lp_B_S[mask_2d][None]}, batch, tokens, {}, "cpu"
    )
    assert not torch.isclose(seq, token, rtol=1e-3)


def test_reference_engine_hands_a_dotted_loss_the_servers_layout():
    payload = build_train_payload(_samples(2), _spec("gspo", "token-mean"))
    parsed = parse_payload(payload, op="train", dp_size=1, grad_accum_steps=1, vocab_size=64)
    (micro,) = parsed.shards[0]
    assert isinstance(micro, MicroBatch) and parsed.loss_callable is not None
    lp_B_S, entropy_B_S = _model_outputs(payload, 2)
    ours_outputs, ours_batch = server_layout(PostOutputs(lp_B_S, entropy_B_S), micro, parsed)

    batch = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    mask_2d = batch["attention_mask"].bool()
    batch = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](batch, mask_2d)
    assert sorted(ours_batch) == sorted(batch)
    for key, value in batch.items():
        assert torch.equal(ours_batch[key], value), key
    assert torch.equal(ours_outputs["logprobs"], lp_B_S[mask_2d].unsqueeze(0))
    assert torch.equal(ours_outputs["entropy"], entropy_B_S[mask_2d].unsqueeze(0))


def test_bad_settings_fail_naming_the_key():
    payload = build_train_payload(_samples(3), _spec("sapo", "token-mean"))
    meta = dict(payload.meta, dp_size=1, policy_loss_config={"loss_mode": "sapo", "tau_pos_typo": 1.0})
    batch = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    batch = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](batch, batch["attention_mask"].bool())
    fn = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)
    with pytest.raises(ValueError, match="tau_pos_typo"):
        fn({"logprobs": torch.zeros(1, 1)}, batch, meta, {}, "cpu")
    with pytest.raises(ValueError, match="loss_mode='vanilla'"):
        fn(
            {"logprobs": torch.zeros(1, 1)},
            batch,
            dict(meta, policy_loss_config={"loss_mode": "vanilla"}),
            {},
            "cpu",
        )


@pytest.mark.parametrize("family", ["dual_clip", "gspo", "sapo"])
def test_zorro_layout_gives_the_same_loss(family):
    """With meta.zorro_train_enable the server keeps only response tokens of the per-token tensors
    (`padded_tensor_2d_full_to_unpadded_tensor_1d_response`) and its patched model returns
    response-aligned log-probs; the loss is the packed-layout loss, bit for bit."""
    payload = build_train_payload(_samples(4), _spec(family, "seq-mean-token-mean"))
    lp_B_S, entropy_B_S = _model_outputs(payload, 4)
    fn = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)
    meta = dict(payload.meta, dp_size=1)

    packed = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    mask_2d = packed["attention_mask"].bool()
    zorro = dict(packed)
    for key, value in packed.items():
        if key not in ("input_ids", "position_ids", "attention_mask") and value.shape == mask_2d.shape:
            zorro[key] = SERVER["padded_tensor_2d_full_to_unpadded_tensor_1d_response"](value, mask_2d, P)
    aligned = (
        torch.roll(lp_B_S, shifts=1, dims=1),
        torch.roll(entropy_B_S, shifts=1, dims=1),
    )  # token j at P+j
    zorro_outputs = {
        key: values[:, P:][mask_2d[:, P:]].unsqueeze(0)
        for key, values in zip(("logprobs", "entropy"), aligned, strict=True)
    }
    torch.manual_seed(0)
    zorro_loss, _ = fn(zorro_outputs, zorro, dict(meta, zorro_train_enable=True), {}, "cpu")

    packed = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](packed, mask_2d)
    outputs = {"logprobs": lp_B_S[mask_2d].unsqueeze(0), "entropy": entropy_B_S[mask_2d].unsqueeze(0)}
    torch.manual_seed(0)
    packed_loss, _ = fn(outputs, packed, meta, {}, "cpu")
    torch.testing.assert_close(zorro_loss, packed_loss, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("family", ["dual_clip", "gspo"])
def test_unpacked_layout_gives_the_same_loss(family, mode):
    """`PayloadSpec.rows_unpacked` (sdpa/eager without ZoRRo): meta.cu_seqlens makes 0.1.4's pipeline skip
    its packing info and unpad, so the loss sees `[B, S]` tensors and log-probs; loss and gradient are the
    packed layout's, bit for bit."""
    import dataclasses

    spec = dataclasses.replace(_spec(family, mode), rows_unpacked=True)
    payload = build_train_payload(_samples(5), spec)
    assert "cu_seqlens" in payload.meta and payload.meta["cu_seqlens"] is None
    lp_B_S, entropy_B_S = _model_outputs(payload, 5)
    fn = resolve_fn(dict(LOSS_FNS), SERVER_LOSS_FN)
    meta = dict(payload.meta, dp_size=2)

    lp_B_S.requires_grad_(True)
    batch = {k: v.clone() for k, v in payload.batch.items()}  # what the server passes when already packed
    torch.manual_seed(0)
    unpacked_loss, unpacked_metrics = fn({"logprobs": lp_B_S, "entropy": entropy_B_S}, batch, meta, {}, "cpu")
    unpacked_loss.backward()
    unpacked_grad, lp_B_S.grad = lp_B_S.grad.clone(), None

    packed = SERVER["compute_packing_info_for_batch"]({k: v.clone() for k, v in payload.batch.items()})
    mask_2d = packed["attention_mask"].bool()
    packed = SERVER["padded_tensor_2d_dict_to_unpadded_tensor_1d_dict"](packed, mask_2d)
    outputs = {"logprobs": lp_B_S[mask_2d].unsqueeze(0), "entropy": entropy_B_S[mask_2d].unsqueeze(0)}
    meta.pop("cu_seqlens")
    torch.manual_seed(0)
    packed_loss, packed_metrics = fn(outputs, packed, meta, {}, "cpu")
    packed_loss.backward()
    torch.testing.assert_close(unpacked_loss, packed_loss, rtol=0, atol=0)
    torch.testing.assert_close(unpacked_grad, lp_B_S.grad, rtol=0, atol=0)
    assert unpacked_metrics == packed_metrics and unpacked_grad.abs().sum() > 0

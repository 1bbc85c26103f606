"""The one wire payload: the dense batch the Arctic server (and the reference backend) consumes.

Build it with `build_forward_payload` / `build_train_payload` from `RolloutSample`s and a
`PayloadSpec`; read forward log-probs back with `response_logprobs`; compare payloads with
`payload_digest`; check foreign payloads with `validate_payload`.

Layout (P = max_prompt_len, R = max_response_len, S = P + R; row b has a prompt of
Lp_b >= 1 tokens and a response of Lr_b <= R tokens):

    column:           0 ...... P-Lp_b-1 | P-Lp_b ...... P-1 | P ...... P+Lr_b-1 | P+Lr_b ... S-1
    input_ids         pad               | prompt tokens     | response tokens   | pad
    attention_mask    0                 | 1                 | 1                 | 0
    position_ids      0                 | 0 .. Lp_b-1       | Lp_b .. Lp_b+Lr_b-1 | 0
    per-token fields  0                 | 0                 | response values   | 0

- `prompts` is `input_ids[:, :P]` (the server reads its width as P).
- dtypes: `input_ids`, `prompts`, `position_ids`, `attention_mask`, `response_mask`, `loss_mask`
  int64; `advantages`, `old_log_probs`, `ref_log_prob`, `rollout_log_probs`, `rollout_is_weights`
  float32.
- Per-token fields (`response_mask`, `loss_mask` = `response_mask`, `advantages`,
  `old_log_probs`, optional `ref_log_prob`, `rollout_log_probs` and `rollout_is_weights`, the
  trainer's rollout-correction weights) are TOKEN-ALIGNED in the
  request: the value of response token j of row b is at column P + j, the column of that token
  in `input_ids`. So `old_log_probs[b, P+j] = log p(input_ids[b, P+j] | input_ids[b, :P+j])`.

What the server's no-grad forward returns (`ForwardOutput.logprobs_B_S`) is laid out differently:
- without ZoRRo it is SHIFTED: `logprobs[b, t] = log p(input_ids[b, t+1])` for real columns t
  except the last one of the row (meaningless); padding holds float(pad_token_id). Response
  token j of row b is therefore at column P + j - 1;
- with ZoRRo (`meta.zorro_train_enable`) it is token-aligned: column P + j, zeros elsewhere.
`response_logprobs` undoes either into response-aligned `[B, R]` values plus a mask, which go
back into `RolloutSample.old_logprobs` / `ref_logprobs` (`with_response_logprobs`) and from
there to column P + j of the train payload. Element-wise, the train payload therefore pairs
`old_log_probs[b, P+j]` with the training forward's log-prob of the same token j.

Verified against the arctic-platform 0.1.4 server source: its `verl_grpo` loss unpads every
`[B, S]` tensor by `attention_mask`; without ZoRRo it moves the model's shifted log-probs one
place right inside each response window (`mask_and_pad_for_log_probs`: `out[i] = lp[i-1]`, i.e.
log p(token i) at token i) and compares them with `old_log_probs` at the same packed index; with
ZoRRo it takes `tensor[:, P:][attention_mask[:, P:]]` from the batch and the model's
response-aligned log-probs. Both require the token-aligned request layout above; upstream's verl
adapter also left-pads its `[B, R]` tensors to `[B, S]`, which puts token j at column P + j.
`tests/core/runtime/test_runtime_wire_server_loss.py` runs the installed `verl_grpo` loss on a
payload built here.

Temperature: both payloads post-process with `apply_temperature` then
`compute_entropy_and_logprobs`, so old/reference log-probs and training log-probs come from the
same `logits / meta.temperature`.
"""

from arctic_rl_core.wire.build import (
    IGNORE_INDEX,
    PayloadError,
    build_forward_payload,
    build_sft_payload,
    build_train_payload,
)
from arctic_rl_core.wire.digest import canonical_json, payload_digest, payload_to_trace_record
from arctic_rl_core.wire.logprobs import response_logprobs, with_response_logprobs
from arctic_rl_core.wire.sample import RolloutSample
from arctic_rl_core.wire.spec import PayloadSpec, PayloadSpecError
from arctic_rl_core.wire.validate import validate_payload

__all__ = [
    "IGNORE_INDEX",
    "PayloadError",
    "PayloadSpec",
    "PayloadSpecError",
    "RolloutSample",
    "build_forward_payload",
    "build_sft_payload",
    "build_train_payload",
    "canonical_json",
    "payload_digest",
    "payload_to_trace_record",
    "response_logprobs",
    "validate_payload",
    "with_response_logprobs",
]

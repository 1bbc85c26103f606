"""SkyRL's left-padded batch <-> the core wire payload, token for token."""

from __future__ import annotations

import torch
from adapter_skyrl.samples import response_lengths, to_rollout_samples, to_skyrl_rows
from arctic_rl_core.wire import PayloadSpec, build_forward_payload, build_train_payload, response_logprobs
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

PROMPTS = [[11, 12, 13], [21], [31, 32, 33, 34, 35]]
RESPONSES = [[101, 102], [201, 202, 203, 204], [301]]
LOSS_MASKS = [[1, 1], [1, 0, 1, 1], [1]]


def _skyrl_batch() -> TrainingInputBatch:
    seqs, attn, resp_mask, _rewards, loss_mask, _lp, _ei, _ss = convert_prompts_responses_to_batch_tensors(
        0, PROMPTS, RESPONSES, [[0.0] * len(r) for r in RESPONSES], LOSS_MASKS
    )
    R = resp_mask.shape[1]
    # Right-aligned response values, as SkyRL stores them: value = token id / -1000.
    right = torch.zeros((3, R))
    for b, r in enumerate(RESPONSES):
        right[b, R - len(r) :] = torch.tensor(r, dtype=torch.float32) / -1000.0
    batch = TrainingInputBatch(
        {
            "sequences": seqs,
            "attention_mask": attn,
            "response_mask": resp_mask,
            "loss_mask": loss_mask,
            "advantages": right * 10,
            "action_log_probs": right,
            "base_action_log_probs": right * 2,
            "rollout_logprobs": None,
        }
    )
    batch.metadata = {"response_length": R}
    return batch


def _spec() -> PayloadSpec:
    return PayloadSpec(
        pad_token_id=0, max_prompt_len=6, max_response_len=5, rollout_n=1, temperature=1.0, use_kl_loss=True
    )


def test_rows_become_samples_with_the_original_tokens_and_values():
    samples = to_rollout_samples(_skyrl_batch(), with_advantages=True, with_old=True, with_ref=True)
    assert [list(s.prompt_ids) for s in samples] == PROMPTS
    assert [list(s.response_ids) for s in samples] == RESPONSES
    assert [list(s.response_mask) for s in samples] == LOSS_MASKS
    for s, r in zip(samples, RESPONSES, strict=True):
        expected = [t / -1000.0 for t in r]
        assert s.old_logprobs == torch.tensor(expected).tolist()
        assert s.ref_logprobs == (torch.tensor(expected) * 2).tolist()
        assert s.advantages == (torch.tensor(expected) * 10).tolist()


def test_train_payload_puts_old_logprobs_at_their_tokens():
    payload = build_train_payload(
        to_rollout_samples(_skyrl_batch(), with_advantages=True, with_old=True, with_ref=True), _spec()
    )
    ids, old = payload.batch["input_ids"], payload.batch["old_log_probs"]
    mask = payload.batch["response_mask"].bool()
    # Token-aligned: at every loss position the old log-prob is (that token's id) / -1000.
    assert torch.equal(old[mask], ids[mask].to(torch.float32) / -1000.0)
    assert payload.meta["batch_num_tokens"] == sum(map(sum, LOSS_MASKS))


def test_server_logprobs_come_back_right_aligned_like_skyrl_workers():
    data = _skyrl_batch()
    spec = _spec()
    payload = build_forward_payload(
        to_rollout_samples(data, with_advantages=False, with_old=False, with_ref=False), spec
    )
    ids = payload.batch["input_ids"]
    # What the server returns: shifted, logprobs[b, t] = f(token t+1); padding = pad id value.
    shifted = torch.full(ids.shape, float(spec.pad_token_id))
    shifted[:, :-1] = ids[:, 1:].to(torch.float32) / -1000.0
    values_B_R, _ = response_logprobs(shifted, payload, spec)
    rows = to_skyrl_rows(values_B_R, response_lengths(data), data["response_mask"].shape[1])
    got = torch.tensor([row["logprobs"] for row in rows])
    assert torch.equal(got, data["action_log_probs"])  # exactly SkyRL's right-aligned layout

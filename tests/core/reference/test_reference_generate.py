"""Sampling: vLLM semantics, determinism, log-probs consistent with the forward pass, weights version."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_core.backends.protocol import FinishReason, SamplingParams
from arctic_rl_core.wire import build_forward_payload, response_logprobs

PROMPTS = ["What is 2 + 3?", "SELECT name FROM", "The answer is"]


def test_same_seed_same_completions_and_seeded_rows_repeat(engine_factory, ref):
    params = SamplingParams(max_tokens=8, temperature=1.0)
    first = ref.run(engine_factory(seed=5).generate(PROMPTS, params))
    second = ref.run(engine_factory(seed=5).generate(PROMPTS, params))
    other = ref.run(engine_factory(seed=6).generate(PROMPTS, params))
    assert [c.token_ids for c in first.completions] == [c.token_ids for c in second.completions]
    assert [c.token_ids for c in first.completions] != [c.token_ids for c in other.completions]
    # a per-request seed gives each prompt its own generator: identical prompts repeat (vLLM semantics)
    engine = engine_factory(seed=5)
    seeded = ref.run(
        engine.generate([PROMPTS[0]] * 3, SamplingParams(max_tokens=8, temperature=1.0, seed=11))
    )
    assert len({c.token_ids for c in seeded.completions}) == 1
    unseeded = ref.run(engine.generate([PROMPTS[0]] * 3, SamplingParams(max_tokens=8, temperature=1.0)))
    assert len({c.token_ids for c in unseeded.completions}) > 1


def test_completion_fields_and_sampled_logprobs_match_the_forward(engine_factory, ref):
    engine = engine_factory()
    out = ref.run(engine.generate(PROMPTS, SamplingParams(max_tokens=5, temperature=1.0, logprobs=True)))
    assert out.weights_version == 0
    from arctic_rl_core.wire import RolloutSample

    samples = []
    for prompt, completion in zip(PROMPTS, out.completions, strict=True):
        assert completion.prompt_token_ids == tuple(engine.tokenizer.encode(prompt))
        assert completion.prompt_len == len(completion.prompt_token_ids)
        assert completion.generation_len == len(completion.token_ids) == len(completion.logprobs) == 5
        assert completion.finish_reason == FinishReason.LENGTH
        assert completion.text == engine.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        samples.append(
            RolloutSample(prompt_ids=completion.prompt_token_ids, response_ids=completion.token_ids)
        )
    width = max(len(s.prompt_ids) for s in samples)
    spec = ref.spec(engine, max_prompt_len=width, max_response_len=5)
    payload = build_forward_payload(samples, spec)
    values, mask = response_logprobs(ref.run(engine.forward(payload)).logprobs_B_S, payload, spec)
    expected = torch.tensor([c.logprobs for c in out.completions])
    assert mask.all()
    torch.testing.assert_close(values, expected, atol=2e-5, rtol=0)


def test_processed_logprobs_equal_the_trainers_temperature_scaled_forward(engine_factory, ref):
    """At temperature 0.6 and the same weights, vLLM's processed_logprobs are the trainer's
    apply_temperature log-probs (importance weights of 1); raw_logprobs (vLLM's default) are not."""
    from arctic_rl_core.wire import RolloutSample

    params = SamplingParams(max_tokens=5, temperature=0.6, logprobs=True, seed=3)
    got = {}
    for mode in ("processed_logprobs", "raw_logprobs"):
        engine = engine_factory(logprobs_mode=mode)
        got[mode] = ref.run(engine.generate(PROMPTS, params)).completions
    # the mode changes the reported log-probs, never the draw
    assert [c.token_ids for c in got["processed_logprobs"]] == [c.token_ids for c in got["raw_logprobs"]]
    samples = [
        RolloutSample(prompt_ids=c.prompt_token_ids, response_ids=c.token_ids) for c in got["raw_logprobs"]
    ]
    spec = ref.spec(
        engine, max_prompt_len=max(len(s.prompt_ids) for s in samples), max_response_len=5, temperature=0.6
    )
    payload = build_forward_payload(samples, spec)
    values, mask = response_logprobs(ref.run(engine.forward(payload)).logprobs_B_S, payload, spec)
    assert mask.all()
    processed = torch.tensor([c.logprobs for c in got["processed_logprobs"]])
    raw = torch.tensor([c.logprobs for c in got["raw_logprobs"]])
    torch.testing.assert_close(values, processed, atol=2e-5, rtol=0)
    assert (values - raw).abs().max() > 1e-2  # the bias the raw mode puts into every IS weight


def test_processed_logprobs_renormalise_over_the_top_k_kept_set(engine_factory, ref):
    engine = engine_factory(logprobs_mode="processed_logprobs")
    sequences, _ = ref.run(
        engine.sample(PROMPTS, SamplingParams(max_tokens=4, temperature=0.6, top_k=2), top_logprobs=3)
    )
    for seq in sequences:
        for token, entries in zip(seq.token_ids, seq.top_logprobs, strict=True):
            kept = [lp for lp, _rank in entries.values() if lp > float("-inf")]
            assert len(kept) == 2 and entries[token][0] > float("-inf")  # vLLM: after top-k masking
            assert sum(torch.tensor(kept).exp().tolist()) == pytest.approx(1.0, abs=1e-5)


def test_truncated_processed_logprobs_sit_above_the_trainers_by_the_kept_mass(engine_factory, ref):
    """Why top-k/top-p with processed_logprobs is refused at dry run (config.truncated_sampling): with
    top_p < 1 the processed log-probs are renormalised over the kept tokens, the trainer's forward is over
    the whole vocabulary, so the IS weight exp(trainer - rollout) is the kept mass (< 1), not 1, at the same
    weights. The remedy it names: raw_logprobs at temperature 1 equal the trainer's whatever is kept."""
    from arctic_rl_core.wire import RolloutSample

    def trainer_and_rollout(mode: str, params: SamplingParams):
        engine = engine_factory(logprobs_mode=mode)
        completions = ref.run(engine.generate(PROMPTS, params)).completions
        samples = [
            RolloutSample(prompt_ids=c.prompt_token_ids, response_ids=c.token_ids) for c in completions
        ]
        spec = ref.spec(
            engine,
            max_prompt_len=max(len(s.prompt_ids) for s in samples),
            max_response_len=params.max_tokens,
            temperature=params.temperature,
        )
        payload = build_forward_payload(samples, spec)
        values, mask = response_logprobs(ref.run(engine.forward(payload)).logprobs_B_S, payload, spec)
        lengths = [len(c.token_ids) for c in completions]
        rollout = torch.tensor(
            [
                list(c.logprobs) + [0.0] * (params.max_tokens - n)
                for c, n in zip(completions, lengths, strict=True)
            ]
        )
        return values, rollout, mask

    trainer, rollout, mask = trainer_and_rollout(
        "processed_logprobs", SamplingParams(max_tokens=6, temperature=0.6, top_p=0.8, logprobs=True, seed=3)
    )
    is_weights = (trainer - rollout).exp()[mask]
    assert (is_weights <= 1 + 1e-5).all() and is_weights.min() < 0.95  # biased below 1 at staleness 0
    trainer, rollout, mask = trainer_and_rollout(
        "raw_logprobs", SamplingParams(max_tokens=6, temperature=1.0, top_k=3, logprobs=True, seed=3)
    )
    torch.testing.assert_close(trainer[mask], rollout[mask], atol=2e-5, rtol=0)


def test_greedy_top_k_one_and_tiny_top_p_agree(engine_factory, ref):
    engine = engine_factory()
    greedy = ref.run(engine.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=0.0)))
    top_k = ref.run(engine.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=1.3, top_k=1)))
    top_p = ref.run(engine.generate(PROMPTS, SamplingParams(max_tokens=6, temperature=0.7, top_p=1e-6)))
    tokens = [c.token_ids for c in greedy.completions]
    assert tokens == [c.token_ids for c in top_k.completions] == [c.token_ids for c in top_p.completions]
    # greedy decoding with the KV cache equals argmax of a full forward over the growing sequence
    ids = list(greedy.completions[0].prompt_token_ids)
    for token in tokens[0]:
        with torch.no_grad():
            logits = engine._sampler(input_ids=torch.tensor([ids])).logits[0, -1]
        assert int(torch.argmax(logits)) == token
        ids.append(token)


def test_stop_strings_and_stop_tokens(engine_factory, ref):
    engine = engine_factory()
    free = ref.run(engine.generate([PROMPTS[1]], SamplingParams(max_tokens=12, temperature=0.0))).completions[
        0
    ]
    assert len(free.text) >= 4
    stop = free.text[2:4]
    stopped = ref.run(
        engine.generate([PROMPTS[1]], SamplingParams(max_tokens=12, temperature=0.0, stop=(stop,)))
    )
    completion = stopped.completions[0]
    assert completion.finish_reason == FinishReason.STOP
    assert completion.text == free.text[: free.text.find(stop)]
    assert free.token_ids[: len(completion.token_ids)] == completion.token_ids
    # vLLM's stop_token_ids (what verl's tool parsers add): the completion ends with that token, kept
    cut = free.token_ids[3]
    by_id = ref.run(
        engine.generate([PROMPTS[1]], SamplingParams(max_tokens=12, temperature=0.0, stop_token_ids=(cut,)))
    ).completions[0]
    first = free.token_ids.index(cut)
    assert by_id.token_ids == free.token_ids[: first + 1] and by_id.finish_reason == FinishReason.STOP
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(max_tokens=2, stop_token_ids=(-1,))
    # a sampler head that always prefers eos: generation stops on it, eos is kept in the ids, not the text
    eos = engine.tokenizer.eos_token_id
    head = torch.nn.Linear(engine._sampler.config.hidden_size, engine.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[eos] = 30.0
    engine._sampler.lm_head = head
    out = ref.run(engine.generate([PROMPTS[0]], SamplingParams(max_tokens=6, temperature=1.0))).completions[0]
    assert out.token_ids == (eos,) and out.finish_reason == FinishReason.STOP and out.text == ""


def test_token_id_prompts_and_bad_prompts(engine_factory, ref):
    engine = engine_factory()
    ids = engine.tokenizer.encode(PROMPTS[0])
    by_text = ref.run(engine.generate([PROMPTS[0]], SamplingParams(max_tokens=4, temperature=0.0)))
    by_ids = ref.run(engine.generate([ids], SamplingParams(max_tokens=4, temperature=0.0)))
    assert by_text.completions[0].token_ids == by_ids.completions[0].token_ids
    with pytest.raises(ValueError, match="do not mix text and token-id prompts"):
        ref.run(engine.generate([ids, "text"], SamplingParams(max_tokens=2)))
    with pytest.raises(ValueError, match="outside"):
        ref.run(engine.generate([[5, 10_000]], SamplingParams(max_tokens=2)))
    with pytest.raises(ValueError, match="empty"):
        ref.run(engine.generate([[]], SamplingParams(max_tokens=2)))


def test_generation_stops_at_the_model_length(engine_factory, ref):
    engine = engine_factory(model={"max_position_embeddings": 64})
    prompt = list(range(10, 70))  # 60 tokens, 4 left before 64
    out = ref.run(engine.generate([prompt], SamplingParams(max_tokens=50, temperature=0.0))).completions[0]
    assert out.generation_len <= 4 and out.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    with pytest.raises(ValueError, match="not below the model's max length"):
        ref.run(engine.generate([list(range(10, 80))], SamplingParams(max_tokens=2)))

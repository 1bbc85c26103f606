"""The generator over `Backend.generate` with the reference engine: training token ids are the
backend's; text prompts (what the Arctic on-prem server accepts) report re-tokenisation drift."""

from __future__ import annotations

import asyncio

import pytest
from adapter_skyrl.generator import ArcticGenerator, to_sampling_params

SAMPLING = {
    "min_tokens": 1,
    "skip_special_tokens": True,
    "include_stop_str_in_output": True,
    "max_tokens": 5,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "logprobs": 1,
    "stop": None,
}


@pytest.fixture(scope="module")
def backend():
    from arctic_rl_core.config.reference_model import ReferenceModelConfig
    from arctic_rl_core.dispatch import run
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    model = ReferenceModelConfig(num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                 num_key_value_heads=1)  # fmt: skip
    engine = ReferenceBackend(ReferenceEngineSettings(model=model, seed=3, colocated=False))
    run(engine.sync_weights())
    run(engine.reset_prefix_cache())
    yield engine
    run(engine.shutdown())


def _input(rows):
    return {
        "prompts": [r["prompt"] for r in rows],
        "env_classes": [r["env_class"] for r in rows],
        "env_extras": rows,
        "sampling_params": SAMPLING,
        "trajectory_ids": None,
        "batch_metadata": None,
    }


@pytest.mark.parametrize("prompt_format", ["token_ids", "text"])
def test_training_ids_are_the_backends_and_rewards_are_scored(backend, bird_train_rows, prompt_format):
    generator = ArcticGenerator(backend, backend.tokenizer, prompt_format=prompt_format)
    rows = bird_train_rows[:3]
    out = asyncio.run(generator.generate(_input(rows)))
    local = [generator._local_ids(r["prompt"]) for r in rows]
    drift = out["rollout_metrics"]["generate/prompt_retokenization_drift"]
    if prompt_format == "token_ids":
        assert out["prompt_token_ids"] == local and drift == 0.0
    else:  # the backend tokenised the chat-templated text itself; its ids are what we train on
        assert out["prompt_token_ids"] == [backend.tokenizer.encode(generator._template(r["prompt"], tokenize=False))
                                           for r in rows]  # fmt: skip
        assert drift == sum(a != b for a, b in zip(out["prompt_token_ids"], local, strict=True)) / 3
    assert all(1 <= len(ids) <= 5 for ids in out["response_ids"])
    assert [len(lp) for lp in out["rollout_logprobs"]] == [len(ids) for ids in out["response_ids"]]
    assert out["rewards"] == [0.0, 0.0, 0.0] or all(r in (0.0, 0.1, 1.0) for r in out["rewards"])
    assert all("execution_success" in v for v in out["env_metrics"])
    from arctic_rl_core.dispatch import run

    served = run(backend.state()).weights_version
    assert out["rollout_metrics"]["generate/weights_version"] == generator.weights_versions[-1] == served


def test_sampling_params_the_backend_cannot_honour_are_rejected():
    assert to_sampling_params(SAMPLING).logprobs is True
    with pytest.raises(ValueError, match=r"min_p=0\.1"):
        to_sampling_params({**SAMPLING, "min_p": 0.1})
    with pytest.raises(ValueError, match=r"\['repetition_penalty'\]"):
        to_sampling_params({**SAMPLING, "repetition_penalty": 1.2})
    with pytest.raises(ValueError, match="logprobs=5"):
        to_sampling_params({**SAMPLING, "logprobs": 5})


class _OnPremShaped:
    """The reference engine's completions as the on-prem server returns them: no prompt ids,
    only `prompt_len` (here one token more than the local tokenisation, as a drifting server)."""

    serves_forward = True  # the on-prem server has /forward (old log-probs are not the sampler's)

    def __init__(self, engine, extra: int):
        self.engine, self.extra = engine, extra

    async def generate(self, prompts, params):
        import dataclasses

        out = await self.engine.generate(prompts, params)
        completions = [
            dataclasses.replace(c, prompt_token_ids=None, prompt_len=c.prompt_len + self.extra)
            for c in out.completions
        ]
        return dataclasses.replace(out, completions=completions)


@pytest.mark.parametrize(("extra", "drift"), [(0, 0.0), (1, 1.0)])
def test_drift_from_the_servers_prompt_length_when_it_returns_no_ids(backend, bird_train_rows, extra, drift):
    generator = ArcticGenerator(_OnPremShaped(backend, extra), backend.tokenizer, prompt_format="text")
    rows = bird_train_rows[:2]
    out = asyncio.run(generator.generate(_input(rows)))
    assert out["rollout_metrics"]["generate/prompt_retokenization_drift"] == drift
    assert out["prompt_token_ids"] == [generator._local_ids(r["prompt"]) for r in rows]


def test_rollouts_from_stale_weights_are_refused(backend, bird_train_rows):
    from arctic_rl_core.dispatch import run
    from arctic_rl_core.weight_sync import StaleWeightsError

    served = run(backend.state()).weights_version
    fresh = ArcticGenerator(backend, backend.tokenizer, expected_weights_version=lambda: served)
    asyncio.run(fresh.generate(_input(bird_train_rows[:1])))
    stale = ArcticGenerator(backend, backend.tokenizer, expected_weights_version=lambda: served + 1)
    with pytest.raises(StaleWeightsError, match="expected"):
        asyncio.run(stale.generate(_input(bird_train_rows[:1])))


def test_overlong_filtering_zeroes_the_loss_mask_of_truncated_responses(backend, bird_train_rows):
    """SkyRL's generator.apply_overlong_filtering (DAPO): a response that did not stop (truncated at
    max_tokens) trains no token; one that stopped keeps its mask; off, every mask is all ones."""
    rows = bird_train_rows[:4] * 4
    batch = {**_input(rows), "sampling_params": {**SAMPLING, "stop": ["e"]}}  # some stop, some run out
    filtered = asyncio.run(
        ArcticGenerator(backend, backend.tokenizer, apply_overlong_filtering=True).generate(batch)
    )
    stops = filtered["stop_reasons"]
    assert {"stop", "length"} <= set(stops)
    for mask, ids, stop in zip(filtered["loss_masks"], filtered["response_ids"], stops, strict=True):
        assert len(mask) == len(ids) and set(mask) == ({1} if stop == "stop" else {0})
    assert filtered["rollout_metrics"]["generate/overlong_filtered"] == stops.count("length") / len(stops)
    plain = asyncio.run(ArcticGenerator(backend, backend.tokenizer).generate(batch))
    assert all(set(mask) == {1} for mask in plain["loss_masks"])
    assert "generate/overlong_filtered" not in plain["rollout_metrics"]

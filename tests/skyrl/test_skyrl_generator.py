"""SkyRL's own generator (`ArcticGenerator` = `SkyRLGymGenerator` + `ArcticInferenceClient`) on the
reference engine, single turn: the ids trained on are the ids sampled (checked against the client's
own record of each turn), in SkyRL's agent-loop path and in its batched path; text prompts (what the
Arctic on-prem server takes) have their prompt repaired to the server's tokenisation; stale weights
are refused; SkyRL's overlong filtering applies."""

from __future__ import annotations

import asyncio

import pytest
from adapter_skyrl.config import parse_cli
from adapter_skyrl.generator import WEIGHTS_VERSION_KEY, ArcticGenerator
from adapter_skyrl.inference_client import ArcticInferenceClient, to_sampling_params
from arctic_rl_core.dispatch import run
from skyrl_multi_turn import TextOnly

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
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    model = ReferenceModelConfig(num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                 num_key_value_heads=1)  # fmt: skip
    engine = ReferenceBackend(ReferenceEngineSettings(model=model, seed=3, colocated=False, num_threads=1))
    run(engine.sync_weights())
    run(engine.reset_prefix_cache())
    yield engine
    run(engine.shutdown())


def generator(backend, *overrides, **options) -> ArcticGenerator:
    cfg = parse_cli(["generator.max_turns=1", *overrides])
    client = ArcticInferenceClient(backend, backend_tokenizer(backend), model_name="tiny")
    return ArcticGenerator(
        cfg.generator, cfg.environment.skyrl_gym, client, backend_tokenizer(backend), **options
    )


def backend_tokenizer(backend):
    return getattr(backend, "tokenizer", None) or backend.target.tokenizer


def _input(rows, sampling=SAMPLING):
    return {
        "prompts": [r["prompt"] for r in rows],
        "env_classes": [r["env_class"] for r in rows],
        "env_extras": [dict(r) for r in rows],
        "sampling_params": sampling,
        "trajectory_ids": None,
        "batch_metadata": None,
    }


@pytest.mark.parametrize("batched", ["false", "true"])
def test_training_ids_are_the_sampled_ids_and_rewards_are_scored(backend, bird_train_rows, batched):
    gen = generator(backend, f"generator.batched={batched}")
    rows = bird_train_rows[:3]
    out = asyncio.run(gen.generate(_input(rows)))
    turns = [t.turns[0] for t in gen.last_call.trajectories]
    assert [len(t.turns) for t in gen.last_call.trajectories] == [1, 1, 1]
    local = [
        gen.tokenizer.apply_chat_template(
            r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for r in rows
    ]
    assert out["prompt_token_ids"] == local == [list(t.context_ids) for t in turns]
    assert out["response_ids"] == [list(t.token_ids) for t in turns]
    assert out["rollout_logprobs"] == [list(t.logprobs) for t in turns]
    assert out["loss_masks"] == [[1] * len(t.token_ids) for t in turns]
    assert all(1 <= len(ids) <= 5 for ids in out["response_ids"])
    assert all(r in (0.0, 0.1, 1.0) for r in (sum(x) if isinstance(x, list) else x for x in out["rewards"]))
    assert 0.0 <= out["rollout_metrics"]["generate/execution_success_rate"] <= 1.0
    assert out["rollout_metrics"]["generate/scoring_errors"] == 0.0
    served = run(backend.state()).weights_version
    assert out[WEIGHTS_VERSION_KEY] == [served] * 3
    assert out["rollout_metrics"]["generate/weights_version"] == gen.weights_versions[-1] == served
    assert out["rollout_metrics"]["generate/turns_mean"] == 1.0
    assert out["rollout_metrics"]["token_drift/turns"] == 0.0


@pytest.mark.parametrize("batched", ["false", "true"])
def test_text_prompts_train_the_servers_tokenisation_of_the_prompt(backend, bird_train_rows, batched):
    """With text prompts the row's prompt is what the server read (exact: the prompt is not trained)."""
    gen = generator(TextOnly(backend), f"generator.batched={batched}")
    rows = bird_train_rows[:2]
    out = asyncio.run(gen.generate(_input(rows)))
    text = gen.inference_engine_client.sampler.text
    for row, prompt, report in zip(rows, out["prompt_token_ids"], gen.last_call.trajectories, strict=True):
        local = gen.tokenizer.apply_chat_template(
            row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert tuple(prompt) == text.server_ids(text.to_text(local)) == report.turns[0].context_ids
        assert report.turns[0].sent_as == "text"
    assert out["rollout_metrics"]["token_drift/turns"] == 0.0  # one turn: nothing to drift


def test_sampling_params_the_backend_cannot_honour_are_rejected():
    assert to_sampling_params(SAMPLING).logprobs is True
    with pytest.raises(ValueError, match=r"min_p=0\.1"):
        to_sampling_params({**SAMPLING, "min_p": 0.1})
    with pytest.raises(ValueError, match=r"\['repetition_penalty'\]"):
        to_sampling_params({**SAMPLING, "repetition_penalty": 1.2})
    with pytest.raises(ValueError, match="logprobs=5"):
        to_sampling_params({**SAMPLING, "logprobs": 5})


def test_rollouts_from_stale_weights_are_refused(backend, bird_train_rows):
    from arctic_rl_core.weight_sync import StaleWeightsError

    served = run(backend.state()).weights_version
    asyncio.run(
        generator(backend, expected_weights_version=lambda: served).generate(_input(bird_train_rows[:1]))
    )
    stale = generator(backend, expected_weights_version=lambda: served + 1)
    with pytest.raises(StaleWeightsError, match="expected"):
        asyncio.run(stale.generate(_input(bird_train_rows[:1])))


def test_overlong_filtering_zeroes_the_loss_mask_of_truncated_responses(backend, bird_train_rows):
    """SkyRL's generator.apply_overlong_filtering (DAPO): a response that did not stop (truncated at
    max_tokens) trains no token; one that stopped keeps its mask; off, every mask is all ones."""
    rows = bird_train_rows[:4] * 4
    batch = _input(rows, {**SAMPLING, "stop": ["e"]})  # some stop, some run out
    gen = generator(backend, "generator.apply_overlong_filtering=true")
    filtered = asyncio.run(gen.generate(batch))
    stops = filtered["stop_reasons"]
    assert {"stop", "length"} <= set(stops)
    eos = gen.tokenizer.eos_token_id
    for mask, ids, stop, report in zip(
        filtered["loss_masks"], filtered["response_ids"], stops, gen.last_call.trajectories, strict=True
    ):
        sampled = list(report.turns[0].token_ids)
        if stop == "length":
            assert ids == sampled and mask == [0] * len(ids)
        elif sampled[-1] == eos:
            assert ids == sampled and mask == [1] * len(ids)
        else:  # stopped at the stop string: SkyRL appends an EOS it does not train (as on vLLM)
            assert ids == [*sampled, eos] and mask == [1] * len(sampled) + [0]
    assert filtered["rollout_metrics"]["generate/overlong_filtered"] == stops.count("length") / len(stops)
    plain = asyncio.run(generator(backend).generate(batch))
    assert all(mask[0] == 1 for mask in plain["loss_masks"])  # truncated rows train
    assert "generate/overlong_filtered" not in plain["rollout_metrics"]

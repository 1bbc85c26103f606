"""SkyRL 0.4.0's synchronous dynamic sampling (`trainer.algorithm.dynamic_sampling.type`: DAPO's
filter, POLARIS's replace) on the Arctic path, driven by SkyRL's own `RayPPOTrainer.train()`: a third of the
prompts score 0 for every response (a zero-variance group by construction), the other half the
response's vowel share; 2 steps in process (~2 s each), and at dry run every dynamic_sampling field."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import numpy as np
import pytest
import torch
from adapter_skyrl.config import parse_cli
from skyrl_e2e_run import IN_PROCESS, TINY_GRPO, RecordingExp, logged_steps

FLAT_OR_VOWELS = "flat_or_vowels"
N = 2  # samples per prompt
BATCH = 2  # prompts per step


def _register_env() -> None:
    from learnable_reward import vowel_share
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class FlatOrVowels(BaseTextEnv):
        """Reward 0 for every response of a `flat` prompt; else the response's vowel share."""

        def __init__(self, env_config: Any = None, extras: Any = None):
            super().__init__()
            self.flat = bool(dict(extras or {}).get("extra_info", {}).get("flat"))

        def step(self, action: str) -> BaseTextEnvStepOutput:
            reward = 0.0 if self.flat else vowel_share(action)
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})

    if FLAT_OR_VOWELS not in registry:
        register(id=FLAT_OR_VOWELS, entry_point=FlatOrVowels)


@pytest.fixture(scope="module")
def flat_or_vowels_jsonl(tmp_path_factory: pytest.TempPathFactory):
    import json

    from learnable_reward import PROMPTS

    _register_env()
    rows = [
        {
            "data_source": FLAT_OR_VOWELS,
            "prompt": [{"role": "user", "content": f"{prompt} ({i})"}],
            "env_class": FLAT_OR_VOWELS,
            "extra_info": {"index": i, "flat": i % 3 == 0},
        }
        for i, prompt in enumerate(PROMPTS * 4)  # 32 prompts, 11 flat
    ]
    path = tmp_path_factory.mktemp("flat_or_vowels") / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


class DynamicSamplingExp(RecordingExp):
    """Records, per training step, the batch SkyRL trains after its dynamic sampling (uids and
    rewards as `postprocess_generator_output` receives them) and the rows sent to the server."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.trained: list[tuple[list[str], list[float], int]] = []
        super().__init__(*args, **kwargs)

    def trainer_class(self):
        exp = self

        class Recording(super().trainer_class()):
            def postprocess_generator_output(self, out, uids, **kwargs):
                exp.trained.append((list(uids), list(out["rewards"]), len(exp.generator.batches)))
                return super().postprocess_generator_output(out, uids, **kwargs)

        return Recording


def _run(data, tmp_path, *extra: str, base=(*TINY_GRPO, *IN_PROCESS), build=None) -> DynamicSamplingExp:
    """SkyRL's `RayPPOTrainer.train()`, 2 steps, every forward_backward payload kept (`exp.sent`);
    `build` makes the backend from the core config (default: the one it names); shut down after."""
    from arctic_rl_core.backends.forwarding import ForwardingBackend
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.dispatch import run

    sent: list[Any] = []

    class Spy(ForwardingBackend):
        async def forward_backward(self, payload):
            sent.append(payload)
            return await self.target.forward_backward(payload)

    overrides = [
        f"data.train_data=['{data}']", f"trainer.ckpt_path={tmp_path / 'ckpt'}",
        f"trainer.export_path={tmp_path / 'export'}", "trainer.ckpt_interval=0", "trainer.resume_mode=none",
        f"environment.env_class={FLAT_OR_VOWELS}", f"generator.n_samples_per_prompt={N}",
        f"trainer.train_batch_size={BATCH}", f"trainer.policy_mini_batch_size={BATCH}",
        "trainer.update_epochs_per_batch=1", "trainer.max_training_steps=2", *extra,
    ]  # fmt: skip
    exp = DynamicSamplingExp(
        parse_cli([*base, *overrides]), backend_factory=lambda cfg: Spy((build or create_backend)(cfg))
    )
    try:
        asyncio.run(exp._setup_trainer().train())
    finally:
        run(exp.backend.shutdown())
    exp.sent = sent
    return exp


def _groups(uids: list[str], rewards: list[float]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {}
    for uid, reward in zip(uids, rewards, strict=True):
        groups.setdefault(uid, []).append(float(reward))
    return groups


def _call_groups(batch: dict[str, Any]) -> list[tuple[bool, list[float]]]:
    """(flat?, rewards) of each prompt group of one generate call (SkyRL repeats each prompt N times in a row)."""
    flat = [bool(e["extra_info"]["flat"]) for e in batch["extras"]]
    rewards = batch["rewards"]
    return [(flat[i], rewards[i : i + N]) for i in range(0, len(rewards), N)]


def _varied(rewards: list[float]) -> bool:
    return float(np.std(rewards)) > 0


def _steps(exp: DynamicSamplingExp) -> list[list[dict[str, Any]]]:
    """The generate calls (recorded batches) that made each trained step."""
    out, start = [], 0
    for _, _, calls in exp.trained:
        out.append(exp.generator.batches[start:calls])
        start = calls
    return out


def _check_trained_batches(exp: DynamicSamplingExp) -> None:
    """Each step SkyRL trained train_batch_size groups of N rollouts, each with reward variance; the
    server got exactly those rows, every one with a non-zero advantage; one weights version per step."""
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2] and len(exp.trained) == 2
    for uids, rewards, _ in exp.trained:
        groups = _groups(uids, rewards)
        assert len(uids) == BATCH * N
        assert all(_varied(r) for r in groups.values()), groups
    rows = [torch.as_tensor(p.batch["response_mask"]) for p in exp.sent]
    advantages = [torch.as_tensor(p.batch["advantages"]) for p in exp.sent]
    assert sum(len(r) for r in rows) == 2 * BATCH * N  # one epoch of one mini-batch a step
    for mask, adv in zip(rows, advantages, strict=True):
        assert ((adv * mask).abs().sum(-1) > 0).all()  # no zero-variance group reached the server
    for step, calls in enumerate(_steps(exp), start=1):
        assert {c["version"] for c in calls} == {step - 1}  # every call of a step: the last sync's weights
        assert steps[step]["generate/dynamic_sampling_calls"] == len(calls)
        assert steps[step]["generate/weights_version"] == step - 1
        scoring_errors = steps[step]["generate/scoring_errors"]
        assert scoring_errors == 0


@pytest.fixture(scope="module")
def filter_run(flat_or_vowels_jsonl, tmp_path_factory):
    return _run(
        flat_or_vowels_jsonl,
        tmp_path_factory.mktemp("filter"),
        "trainer.algorithm.dynamic_sampling.type=filter",
    )


def test_filter_drops_zero_variance_groups_and_generates_until_the_batch_is_full(filter_run):
    """SkyRL's filter rule, checked on what was generated: a step's calls go on until BATCH groups with
    reward variance are collected (the last call may bring more: SkyRL keeps the first BATCH), and the
    trained rewards are exactly those groups' in call order."""
    exp = filter_run
    _check_trained_batches(exp)
    flat_seen = 0
    for (_, rewards, _), calls in zip(exp.trained, _steps(exp), strict=True):
        kept, counts = [], []
        for call in calls:
            groups = _call_groups(call)
            flat_seen += sum(flat for flat, _ in groups)
            assert all(not _varied(r) for flat, r in groups if flat)  # a flat prompt: zero variance
            kept += [r for _, r in groups if _varied(r)]
            counts.append(len(kept))
        assert counts[-1] >= BATCH and all(c < BATCH for c in counts[:-1])  # no call more than needed
        assert rewards == [x for r in kept[:BATCH] for x in r]
    assert flat_seen > 0  # zero-variance groups were generated, and none was trained
    # a call with no group to keep (SkyRL 0.4.0 itself fails there: the adapter counts it and goes on)
    assert any(not any(_varied(r) for _, r in _call_groups(c)) for c in exp.generator.batches)
    assert len(exp.generator.batches) > 2  # and a step took more than one generate call


def test_filter_stops_the_run_at_max_sample_batches(flat_or_vowels_jsonl, tmp_path):
    """max_sample_batches drives SkyRL's loop: with 1, the first call lacking BATCH varied groups ends the run."""
    with pytest.raises(
        RuntimeError, match="dynamic sampling limit for filter strategy with 1 max sample batches"
    ):
        _run(flat_or_vowels_jsonl, tmp_path, "trainer.algorithm.dynamic_sampling.type=filter",
             "trainer.algorithm.dynamic_sampling.max_sample_batches=1")  # fmt: skip


@pytest.mark.parametrize("ratio", [0.3, 0.5])
def test_replace_swaps_zero_variance_groups_for_copies_of_varied_ones(flat_or_vowels_jsonl, tmp_path, ratio):
    """SkyRL's replace rule: a call with MORE than min_replace_ratio x BATCH varied groups is trained,
    each zero-variance group in its slot replaced by a copy of a varied one (its uid too); a call with
    fewer is dropped and the next batch generated. BATCH=2: at 0.3 one varied group is enough, at 0.5
    both must be."""
    exp = _run(flat_or_vowels_jsonl, tmp_path, "trainer.algorithm.dynamic_sampling.type=replace",
               f"trainer.algorithm.dynamic_sampling.min_replace_ratio={ratio}")  # fmt: skip
    _check_trained_batches(exp)
    replaced, one_varied_dropped = 0, 0
    for (uids, rewards, _), calls in zip(exp.trained, _steps(exp), strict=True):
        *dropped, used = [_call_groups(c) for c in calls]
        for groups in dropped:
            varied = sum(_varied(r) for _, r in groups)
            assert varied <= BATCH * ratio
            one_varied_dropped += varied == 1
        varied = [r for _, r in used if _varied(r)]
        assert len(varied) > BATCH * ratio
        trained = [rewards[i : i + N] for i in range(0, len(rewards), N)]
        slot_uids = [uids[i] for i in range(0, len(uids), N)]
        for k, (_, own) in enumerate(used):
            if _varied(own):
                assert trained[k] == own  # a varied group stays in its slot
            else:
                assert trained[k] in varied  # a zero-variance group (every flat one): a copy of a varied one
                sources = [j for j, (_, o) in enumerate(used) if _varied(o) and o == trained[k]]
                assert sources and slot_uids[k] in {slot_uids[j] for j in sources}  # with its uid
                replaced += 1
    if ratio == 0.3:
        assert replaced > 0  # zero-variance groups were replaced, not trained
    else:
        assert replaced == 0 and one_varied_dropped > 0  # what 0.3 would have replaced was resampled


def test_colocated_filter_keeps_the_sampler_awake_across_a_steps_generate_calls(
    flat_or_vowels_jsonl, tmp_path
):
    """SkyRL's DAPO gsm8k launcher is colocated: the sampler sleeps once per step, after the step's
    last generate call and before training, however many calls the step took."""
    from arctic_rl_core.backends.registry import create_backend
    from skyrl_e2e_run import CallLog

    logs: list[CallLog] = []

    def build(cfg):
        logs.append(CallLog(create_backend(cfg)))
        return logs[-1]

    exp = _run(flat_or_vowels_jsonl, tmp_path, "trainer.algorithm.dynamic_sampling.type=filter",
               "trainer.placement.colocate_all=true", build=build)  # fmt: skip
    _check_trained_batches(exp)
    calls = [c for c in logs[0].calls if c in ("generate", "sleep_inference", "forward_backward")]
    per_step = [len(c) for c in _steps(exp)]
    assert max(per_step) > 1  # a step of several generate calls
    expected = []
    for n in per_step:
        expected += ["generate"] * n + ["sleep_inference", "forward_backward"]
    assert calls == expected


def test_a_steps_generator_metrics_are_over_all_its_calls():
    from adapter_skyrl.generator import combine_call_metrics

    calls = [
        (4, {"generate/weights_version": 3.0, "generate/overlong_filtered": 0.5, "generate/env_errors": 1.0,
             "generate/scoring_errors": 1.0, "generate/turns_mean": 2.0, "generate/turns_max": 3.0}),
        (12, {"generate/weights_version": 3.0, "generate/overlong_filtered": 0.25, "generate/env_errors": 0.0,
              "generate/scoring_errors": 0.0, "generate/turns_mean": 1.5, "generate/turns_max": 2.0}),
    ]  # fmt: skip
    assert combine_call_metrics(calls) == {
        "generate/weights_version": 3.0,
        "generate/weights_version_max": 3.0,
        "generate/overlong_filtered": (4 * 0.5 + 12 * 0.25) / 16,
        "generate/turns_mean": (4 * 2.0 + 12 * 1.5) / 16,
        "generate/turns_max": 3.0,
        "generate/env_errors": 1.0,
        "generate/scoring_errors": 1.0,
    }


# -- every dynamic_sampling field at dry run --------------------------------------------------------


def _dry(*args: str) -> tuple[int, str, str]:
    from adapter_skyrl.main import dry_run

    out, err = io.StringIO(), io.StringIO()
    return dry_run([*TINY_GRPO, *IN_PROCESS, *args], out=out, err=err), out.getvalue(), err.getvalue()


def test_filter_and_replace_pass_dry_run_saying_what_skyrls_trainer_does():
    code, out, err = _dry("trainer.algorithm.dynamic_sampling.type=filter",
                          "trainer.algorithm.dynamic_sampling.max_sample_batches=5")  # fmt: skip
    assert code == 0, err
    assert "dynamic sampling (filter, SkyRL's trainer)" in out and "until 2 groups are kept" in out
    assert "at most 5 generate calls a step" in out
    code, out, err = _dry("trainer.algorithm.dynamic_sampling.type=replace",
                          "trainer.algorithm.dynamic_sampling.max_sample_batches=-1",
                          "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5")  # fmt: skip
    assert code == 0, err
    assert (
        "dynamic sampling (replace, SkyRL's trainer)" in out and "more than 0.5 of the batch's groups" in out
    )
    assert "no limit generate calls" in out


def test_dynamic_sampling_fields_without_effect_are_said_aloud():
    code, out, err = _dry("trainer.algorithm.dynamic_sampling.max_sample_batches=3",
                          "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.6")  # fmt: skip
    assert code == 0, err
    assert "max_sample_batches=3, min_replace_ratio=0.6 has no effect with type=None" in out
    code, out, err = _dry("trainer.algorithm.dynamic_sampling.type=filter",
                          "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.6")  # fmt: skip
    assert code == 0, err
    assert "min_replace_ratio=0.6 has no effect with type=filter" in out


@pytest.mark.parametrize(
    ("args", "field", "fix"),
    [
        (["trainer.algorithm.dynamic_sampling.type=dapo"], 'trainer.algorithm.dynamic_sampling.type = "dapo"',
         "use filter, replace or null"),
        (["trainer.algorithm.dynamic_sampling.type=replace", "trainer.algorithm.dynamic_sampling.min_replace_ratio=1.0"],
         "trainer.algorithm.dynamic_sampling.min_replace_ratio = 1.0", "set it in [0, 1)"),
    ],
)  # fmt: skip
def test_what_skyrls_dynamic_sampling_cannot_run_is_refused_naming_the_fix(args, field, fix):
    code, _, err = _dry(*args)
    assert code == 2 and field in err and fix in err, err


# -- over the real 0.1.4 client ----------------------------------------------------------------------


def test_filter_over_the_real_client_trains_only_varied_groups_as_the_server_saw_it(
    wire_server, flat_or_vowels_jsonl, tmp_path
):
    """The filter run through ArcticBackend and the real arctic-platform 0.1.4 client against the
    skyrl suite's `serve --reference`: the server's request log has one /generate per generate call
    (its version: the step's), and the rows it trained at each trainer version are exactly the
    rollouts of the first BATCH varied groups of that step's calls."""
    import time

    from arctic_rl_core.backends.arctic import ArcticBackend
    from skyrl_e2e_run import TINY_MODEL
    from wire_server import tiny_model_dir

    wire_server.check_alive()
    assert wire_server.jobs() == {}
    model_dir = tiny_model_dir(tmp_path / "model", 7, **TINY_MODEL)
    mark = wire_server.request_count()
    start = time.perf_counter()
    exp = _run(
        flat_or_vowels_jsonl, tmp_path, "trainer.algorithm.dynamic_sampling.type=filter",
        *wire_server.overrides("trainer.arctic_rl.", model=False), f"trainer.policy.model.path={model_dir}",
        f"trainer.arctic_rl.checkpoint.path={tmp_path / 'server'}", "trainer.arctic_rl.placement.log_prob_gpus=1",
        base=TINY_GRPO, build=ArcticBackend.from_config,
    )  # fmt: skip
    print(f"SkyRL dynamic sampling wire run (filter, 2 steps): {time.perf_counter() - start:.1f} s")
    assert wire_server.jobs() == {}  # the run destroyed the jobs it created
    assert isinstance(exp.backend.target, ArcticBackend)
    lines = wire_server.requests(mark)
    generates = [line for line in lines if line["route"] == "/generate" and line["status"] == 200]
    assert len(generates) == len(exp.generator.batches) > 2  # a step took more than one call
    trained: dict[int, list[str]] = {}
    for line in lines:
        if line["route"] == "/forward-backward" and line["status"] == 200:
            trained.setdefault(int(line["trainer_version"]), []).extend(line["rollouts"])
    assert sorted(trained) == [0, 1]
    _check_trained_batches(exp)
    offset = 0
    for version, calls in enumerate(_steps(exp)):
        kept: list[str] = []
        for batch, line in zip(calls, generates[offset : offset + len(calls)], strict=True):
            assert int(line["weights_version"]) == version == batch["version"]
            for i in range(0, len(batch["rewards"]), N):
                if _varied(batch["rewards"][i : i + N]):
                    kept += line["rollouts"][i : i + N]
        offset += len(calls)
        assert sorted(trained[version]) == sorted(kept[: BATCH * N])

"""The dry run's reading of SkyRL's overrides (`adapter_skyrl.cli_overrides`) and SkyRL's registries
(`adapter_skyrl.registries`): every problem in one round (a misspelt key named with "did you mean",
the rest still checked), skyrl-train 0.4.0's spellings read as SkyRL 0.4.0's, SkyRL's SFT trainer and
the examples with their own config class named as such, and the environment / advantage estimator
checked against what this process registered. In process, no data (~2 s after imports)."""

from __future__ import annotations

import io

import pytest
from adapter_skyrl.main import dry_run
from skyrl_launcher_data import launcher_overrides, problem_paths

BASE = ["trainer.logger=console", "trainer.policy.model.path=Qwen/Qwen3-0.6B"]


def _dry(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return dry_run([*BASE, *args], out=out, err=err), out.getvalue(), err.getvalue()


def test_a_misspelt_key_is_named_with_the_nearest_and_the_rest_is_still_checked():
    code, _, err = _dry(
        ["trainer.train_bacth_size=8", "generator.num_engines=2", "trainer.policy.model.lora.rank=8"]
    )
    assert code == 2 and err.startswith("3 problems"), err
    assert (
        "trainer.train_bacth_size = 8: SkyRL 0.4.0's config has no such field. Fix: did you mean "
        "'trainer.train_batch_size'?" in err
    )
    assert "'num_engines' lives at 'generator.inference_engine.num_engines'; move it there" in err
    assert "lora.rank (core peft.lora_rank) = 8" in err  # checked although the parse had problems


def test_skyrl_train_spellings_are_read_as_skyrl_0_4_0s_with_a_notice():
    from adapter_skyrl.cli_overrides import parse_overrides

    parsed = parse_overrides(
        ["generator.num_inference_engines=4", "generator.inference_engine_tensor_parallel_size=2",
         "+generator.engine_init_kwargs.max_model_len=4096", "generator.async_engine=true",
         "+trainer.algorithm.overlong_buffer.len=64", "generator.enable_http_endpoint=true"]
    )  # fmt: skip
    engine = parsed.cfg.generator.inference_engine
    assert (engine.num_engines, engine.tensor_parallel_size) == (4, 2)
    assert engine.engine_init_kwargs == {"max_model_len": 4096}
    assert (
        "generator.num_inference_engines: skyrl-train 0.4.0's spelling, read as SkyRL 0.4.0's "
        "generator.inference_engine.num_engines" in parsed.notices
    )
    assert any(n.startswith("generator.enable_http_endpoint=true: dropped") for n in parsed.notices)
    # DAPO's nested buffer of skyrl-train's example is the DAPO entry point's field now
    assert [i.path for i in parsed.issues] == [
        "trainer.algorithm.overlong_buffer_len"
    ] and "python -m adapter_skyrl.dapo" in parsed.issues[0].remedy


def test_skyrls_sft_launcher_is_named_as_skyrls_sft_trainer(tmp_path):
    code, _, err = _dry(launcher_overrides("head/examples/train/sft/run_sft_fsdp.sh", tmp_path))
    assert code == 2 and err.startswith("1 problem")
    assert "settings of SkyRL's SFT trainer (skyrl.train.main_sft, its SFTConfig)" in err
    assert "Fix: run SkyRL's SFT trainer itself: python -m skyrl.train.main_sft" in err


def test_an_examples_own_config_fields_are_named_with_the_example(tmp_path):
    code, _, err = _dry(launcher_overrides("head/examples/train/mini_swe_agent/run_mini_swe_8B.sh", tmp_path))
    assert code == 2
    assert "generator.miniswe_config_path, generator.miniswe_traj_dir" in problem_paths(err)
    assert "fields of SkyRL's mini-SWE-agent (examples/train/mini_swe_agent" in err


def test_an_entry_points_own_flag_is_one_problem():
    code, _, err = _dry(["--env_variant", "instruct"])
    assert code == 2 and problem_paths(err) == ["--env_variant instruct"]


def test_the_environment_must_be_registered_in_this_process():
    from skyrl_gym.envs.registration import deregister, register

    code, _, err = _dry(["environment.env_class=arctic_test_judge"])
    assert code == 2 and problem_paths(err) == ["environment.env_class"]
    assert "no skyrl-gym environment of that name is registered in this process" in err
    register(id="arctic_test_judge", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    try:
        code, _, err = _dry(["environment.env_class=arctic_test_judge"])
        assert code == 0, err
    finally:
        deregister("arctic_test_judge")


def test_the_advantage_estimator_comes_from_skyrls_registry():
    from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry

    code, _, err = _dry(["trainer.algorithm.advantage_estimator=simple_baseline"])
    assert code == 2 and err.startswith("1 problem")  # SkyRL's validate_cfg says the same: once
    assert "not registered in SkyRL's AdvantageEstimatorRegistry in this process" in err
    assert "trains no critic" not in err
    AdvantageEstimatorRegistry.register("simple_baseline", lambda **kwargs: None)
    try:
        code, _, err = _dry(["trainer.algorithm.advantage_estimator=simple_baseline"])
        assert code == 0, err
    finally:
        AdvantageEstimatorRegistry.unregister("simple_baseline")


@pytest.mark.parametrize("estimator", ["gae"])
def test_an_estimator_that_needs_a_critic_is_refused_once(estimator):
    code, _, err = _dry([f"trainer.algorithm.advantage_estimator={estimator}"])
    assert code == 2 and err.startswith("1 problem")
    assert "needs a critic (a value model trained beside the policy)" in err


def test_top_p_is_refused_only_where_a_weight_is_built_from_the_rollout_log_probs():
    """Synchronous, old log-probs from the trainer's forward: the rollout log-probs are never read,
    so top_p < 1 is what the user samples with. With SkyRL's TIS they are read: refused, and the
    check still runs when core validation failed on another setting (every problem at once)."""
    assert _dry(["generator.sampling_params.top_p=0.9"])[0] == 0
    tis = [
        "trainer.algorithm.off_policy_correction.tis_ratio_type=token",
        "generator.sampling_params.logprobs=1",
    ]
    code, _, err = _dry(
        ["generator.sampling_params.top_p=0.9", *tis, "trainer.arctic_rl.deepspeed.offload_param=true"]
    )
    assert code == 2
    assert problem_paths(err) == [
        "trainer.arctic_rl.deepspeed.offload_param",
        "generator.sampling_params.top_p",
    ]


def test_skyrls_one_step_async_example_says_it_runs_synchronously(tmp_path, capsys):
    """SkyRL's examples/train/async (AsyncRayPPOTrainer, one step off-policy) switched to its entry point:
    the dry run passes and says that generation and training take turns here."""
    from adapter_skyrl.one_step_async import main

    with pytest.raises(SystemExit) as info:
        main(
            [
                *launcher_overrides("head/examples/train/async/async_run_gsm8k.sh", tmp_path),
                *BASE,
                "--dry-run",
            ]
        )
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert (
        "SkyRL's one-step off-policy example (examples/train/async, AsyncRayPPOTrainer) runs synchronously"
        in out
    )
    assert "generation                   synchronous" in out

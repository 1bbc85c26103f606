"""`arctic_rl_core.config.engine_fit`: the seed defaults (ZoRRo, its load balancer), DeepSpeed's equal
micro-batches and its ZeRO-3 parameter offload fitted to a framework's settings instead of failing them,
each change with a notice; a knob the user set is never changed. Every fitted config validates."""

from __future__ import annotations

import pytest
from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_core.config.engine_fit import fit_engine_defaults, set_values


def shape(**batch) -> dict:
    base = {"rollouts_per_prompt": 16, "max_prompt_length": 2048, "max_response_length": 8192,
            "prompts_per_step": 512, "mini_batch_prompts": 32}  # fmt: skip
    return {"backend": {"kind": "ray"}, "model": {"name": "Qwen/Qwen3-8B"}, "checkpoint": {"path": "/ckpt"},
            "placement": {"training_gpus": 16, "sampling_gpus": 16, "colocate": True},
            "batch": {**base, **batch}}  # fmt: skip


def fitted(data: dict, **kwargs) -> tuple[ArcticRLConfig, list[str]]:
    fit = fit_engine_defaults(data, **kwargs)
    return ArcticRLConfig.from_dict(set_values(data, fit.values)), fit.notices


def test_the_whole_group_fits_and_nothing_changes():
    data = shape(max_token_len_per_gpu=2048 + 16 * 8192, micro_batch_size_per_gpu=16)
    fit = fit_engine_defaults(data, model_type="qwen3")
    assert fit.values == {} and fit.notices == []
    cfg = ArcticRLConfig.from_dict(data)
    assert cfg.zorro.enable is True and cfg.zorro.max_rollouts is None


def test_zorro_groups_shrink_to_the_token_budget_and_the_micro_batch_follows_it():
    """verl's dapo launcher: 16 rollouts of <= 8192 tokens, a 20480-token budget: prompt + 2 responses
    (18432) fit, prompt + 4 (34816) do not; micro-batches from the budget: one group of 2."""
    cfg, notices = fitted(
        shape(max_token_len_per_gpu=20480), model_type="qwen3", micro_from_token_budget=True
    )
    assert (cfg.zorro.enable, cfg.zorro.max_rollouts, cfg.batch.micro_batch_size_per_gpu) == (True, 2, 2)
    assert cfg.zorro.load_balancer is True
    assert "ZoRRo packs groups of 2 of each prompt's 16 rollouts" in notices[0]
    assert "prompt + 16 responses = 133120 tokens exceed batch.max_token_len_per_gpu=20480" in notices[0]
    assert "micro-batches of 2 rows from the token budget" in notices[1]


def test_a_model_zorro_does_not_patch_turns_it_off_and_the_balancer_still_fits():
    cfg, notices = fitted(
        shape(max_token_len_per_gpu=20480),
        model_type="qwen2",
        micro_from_token_budget=True,
        knob=lambda path: f"+remote_backend.core.{path}",
    )
    assert (cfg.zorro.enable, cfg.zorro.logits_optimization) == (False, "none")
    # the load balancer packs groups of 2 (18432 tokens) into the 20480-token budget
    assert (cfg.zorro.load_balancer, cfg.zorro.max_rollouts) == (True, 2)
    # without ZoRRo a row is prompt + response = 10240 tokens: two per micro-batch
    assert cfg.batch.micro_batch_size_per_gpu == 2
    assert "supports Qwen3-family models only" in notices[0] and "'qwen2'" in notices[0]
    assert "(+remote_backend.core.zorro.enable=true to insist)" in notices[0]


def test_a_micro_batch_that_cannot_hold_whole_groups_turns_zorro_off():
    """verl's run_qwen2_5_32b_fsdp shape on a Qwen3 model: micro-batch 2, groups of 5 (5 is prime)."""
    data = shape(rollouts_per_prompt=5, max_prompt_length=1024, max_response_length=2048, prompts_per_step=1024,
                 mini_batch_prompts=256, micro_batch_size_per_gpu=2, max_token_len_per_gpu=16384)  # fmt: skip
    cfg, notices = fitted(data, model_type="qwen3")
    assert cfg.zorro.enable is False and cfg.batch.micro_batch_size_per_gpu == 2
    assert notices == [
        "ZoRRo (prompt de-duplication in training) is off: a micro-batch of 2 rows cannot hold whole groups "
        "of 5 (zorro.enable=true to insist)"
    ]


def test_no_room_for_one_row_turns_the_load_balancer_off():
    data = shape(rollouts_per_prompt=5, max_prompt_length=1024, max_response_length=2048, prompts_per_step=1024,
                 mini_batch_prompts=256, micro_batch_size_per_gpu=5, max_token_len_per_gpu=3000)  # fmt: skip
    cfg, notices = fitted(data, model_type="qwen3")
    assert (cfg.zorro.enable, cfg.zorro.load_balancer) == (False, False)
    assert "one prompt + response (3072 tokens) exceeds batch.max_token_len_per_gpu=3000" in notices[1]


def test_an_uneven_micro_batch_is_cut_to_a_divisor_of_the_rows_per_gpu():
    """32 prompts x 1 rollout on 8 GPUs: 4 rows each; verl's micro-batch of 8 becomes 4 (one micro-step),
    where the core would refuse 32 rows not divisible by 8 x 8."""
    data = shape(rollouts_per_prompt=1, prompts_per_step=32, mini_batch_prompts=32, micro_batch_size_per_gpu=8,
                 max_prompt_length=1024, max_response_length=2048)  # fmt: skip
    data["placement"] = {"training_gpus": 8, "sampling_gpus": 8, "colocate": True}
    cfg, notices = fitted(data, model_type="qwen2")
    assert cfg.batch.micro_batch_size_per_gpu == 4 and cfg.shape.gradient_accumulation_steps == 1
    assert "batch.micro_batch_size_per_gpu=8 -> 4: each GPU trains 4 rows" in notices[-1]


@pytest.mark.parametrize(
    "user",
    [{"zorro": {"enable": True}}, {"zorro": {"max_rollouts": 16}}, {"zorro": {"load_balancer": True}}],
    ids=["enable", "max_rollouts", "load_balancer"],
)
def test_what_the_user_set_is_never_changed(user):
    data = {**shape(max_token_len_per_gpu=20480, micro_batch_size_per_gpu=16), **user}
    fit = fit_engine_defaults(data, model_type="qwen2")
    for path in fit.values:
        group, _, key = path.partition(".")
        assert key not in user.get(group, {}), (path, fit.values)


def test_the_reference_backend_has_no_zorro_to_fit():
    data = shape(max_token_len_per_gpu=20480, micro_batch_size_per_gpu=16)
    data["backend"] = {"kind": "reference"}
    fit = fit_engine_defaults(data, model_type="qwen2")
    assert "zorro.enable" not in fit.values


def test_parameter_offload_takes_zero_3_unless_the_stage_is_set():
    data = shape(max_token_len_per_gpu=2048 + 16 * 8192, micro_batch_size_per_gpu=16)
    data["deepspeed"] = {"offload_param": True, "offload_optimizer": True}
    cfg, notices = fitted(data, model_type="qwen3", knob=lambda path: f"+remote_backend.core.{path}")
    assert (cfg.deepspeed.zero_stage, cfg.deepspeed.offload_param) == (3, True)
    assert notices == [
        "ZeRO stage 3: deepspeed.offload_param=true offloads the parameters, which DeepSpeed does on ZeRO-3 "
        "only (set +remote_backend.core.deepspeed.zero_stage to choose)"
    ]
    data["deepspeed"]["zero_stage"] = 2  # the user's own stage: kept, and the core names the conflict
    assert "deepspeed.zero_stage" not in fit_engine_defaults(data, model_type="qwen3").values

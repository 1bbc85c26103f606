"""What the translation sets because of how arctic-platform 0.1.4's DeepSpeed worker behaves (issue 28):
the log-prob job's ZeRO stage, torch AdamW instead of the JIT-compiled FusedAdam, fp32 log-probs where
no fused cross-entropy kernel runs, rows sent unpacked without flash attention (and the built-in loss
that cannot take them refused), the flash-attn a local server needs, a launched server's rendezvous
ports. Checked on the `/initialize` bodies the real 0.1.4 client builds (`ArcticClientConfig.to_onprem`),
the payloads and the startup report; tests/core/runtime/test_runtime_real_ray_server.py runs them
through the real server."""

from __future__ import annotations

from pathlib import Path

import pytest
from arctic_rl_core.config import load_config
from arctic_rl_core.config.settings_table import render_settings_table

CONFIGS = Path(__file__).resolve().parents[3] / "recipes" / "configs"
GSM8K = CONFIGS / "gsm8k-qwen3-0.6b-4gpu.yaml"
KL = ["placement.log_prob_gpus=2", "loss.use_kl_loss=true"]
SDPA_CORE_LOSS = ["kernels.attn_implementation=sdpa", "zorro.enable=false", "loss.loss_fn=arctic_rl_core"]


def _bodies(overrides: list[str]) -> dict:
    cfg = load_config(GSM8K, overrides)
    client = cfg.to_client_config()  # the real 0.1.4 ArcticClientConfig
    return {job: client.to_onprem(job) for job in ("training", "log_prob")}, cfg


@pytest.mark.parametrize(("stage", "log_prob_stage"), [(0, 0), (1, 0), (2, 0), (3, 3)])
def test_log_prob_job_runs_zero_0_unless_training_shards_parameters(stage: int, log_prob_stage: int) -> None:
    overrides = [*KL, f"deepspeed.zero_stage={stage}"]
    if stage == 0:
        overrides.append("deepspeed.grad_accum_dtype=bf16")  # DeepSpeed's bf16 + fp32 accumulation rule
    bodies, cfg = _bodies(overrides)
    assert bodies["training"]["ds_config"]["zero_optimization"]["stage"] == stage
    # 0.1.4's worker builds the log-prob engine from this, with no optimizer: stages 1 and 2 assert
    assert bodies["log_prob"]["log_prob_config"]["zero_optimization"] == {"stage": log_prob_stage}
    report = render_settings_table(cfg, framework="core")
    row = next(line for line in report.splitlines() if "log-prob job" in line)
    assert f"ZeRO-{log_prob_stage}, forward only" in row
    assert ("refuses ZeRO-1/2 without an optimizer" in row) is (stage in (1, 2))


def test_log_prob_job_keeps_parameter_offload_on_zero_3_only() -> None:
    bodies, _ = _bodies([*KL, "deepspeed.zero_stage=3", "deepspeed.offload_param=true"])
    assert bodies["log_prob"]["log_prob_config"]["zero_optimization"] == {
        "stage": 3,
        "offload_param": {"device": "cpu", "pin_memory": True},
    }


@pytest.mark.parametrize(
    ("overrides", "torch_adam", "says"),
    [
        ([], True, "FusedAdam would JIT-compile with nvcc"),
        (["deepspeed.offload_optimizer=true"], None, "DeepSpeedCPUAdam"),
        (["optimizer.torch_adam=false"], None, "FusedAdam (JIT-compiled on the node: needs nvcc"),
        (["deepspeed.offload_optimizer=true", "optimizer.torch_adam=true"], True, "(optimizer.torch_adam)"),
    ],
)
def test_torch_adam_unless_offloaded_or_turned_off(overrides: list[str], torch_adam, says: str) -> None:
    bodies, cfg = _bodies(overrides)
    params = bodies["training"]["ds_config"]["optimizer"]["params"]
    assert params.get("torch_adam") is torch_adam  # DeepSpeed pops it: torch.optim.AdamW when true
    row = next(
        line for line in render_settings_table(cfg, framework="core").splitlines() if "  optimizer  " in line
    )
    assert says in row


@pytest.mark.parametrize(
    ("overrides", "fp32"),
    [
        ([], False),  # flash_attention_2: flash-attn's cross-entropy kernel computes in fp32
        (["kernels.attn_implementation=flash_attention_3"], True),
        ([*SDPA_CORE_LOSS], True),
        (
            [*SDPA_CORE_LOSS, "zorro.logits_compute_in_fp32=false"],
            False,
        ),
        (["zorro.logits_compute_in_fp32=true"], True),
    ],
)
def test_fp32_log_probs_where_no_fused_cross_entropy_runs(overrides: list[str], fp32: bool) -> None:
    from arctic_rl_core.wire import PayloadSpec

    bodies, cfg = _bodies(overrides)
    assert cfg.zorro.logits_compute_in_fp32 is fp32
    # the non-ZoRRo path reads it from meta, ZoRRo from the worker config
    assert PayloadSpec.from_config(cfg, pad_token_id=0).base_meta()["logits_compute_in_fp32"] is fp32
    if cfg.zorro.enable:
        assert bodies["training"]["ds_worker_config"]["logits_compute_in_fp32"] is fp32


def test_reference_and_cortex_backends_leave_both_off() -> None:
    cfg = load_config(None, ["backend.kind=reference", "kernels.attn_implementation=sdpa"])
    assert cfg.zorro.logits_compute_in_fp32 is False and cfg.optimizer.torch_adam is False


# -- packed rows without flash attention ---------------------------------------------------------

SDPA = ["kernels.attn_implementation=sdpa", "zorro.enable=false"]


@pytest.mark.parametrize(
    ("overrides", "unpacked"),
    [
        (SDPA, True),
        (["kernels.attn_implementation=eager", "zorro.enable=false"], True),
        (["kernels.attn_implementation=flex_attention", "zorro.enable=false"], True),
        (["zorro.enable=false"], False),  # flash_attention_2: varlen kernel splits the rows
        ([], False),  # ZoRRo packs by itself
        (["backend.kind=reference", "kernels.attn_implementation=sdpa"], False),  # the engine never packs
    ],
)
def test_rows_are_sent_unpacked_without_flash_attention(overrides: list[str], unpacked: bool) -> None:
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_forward_payload, build_train_payload
    from arctic_rl_core.wire.validate import validate_payload

    cfg = load_config(GSM8K, [*overrides, "loss.loss_fn=arctic_rl_core"])
    spec = PayloadSpec.from_config(cfg, pad_token_id=0)
    assert spec.rows_unpacked is unpacked
    samples = [RolloutSample([3, 4], [5, 6], old_logprobs=[-1.0, -1.0], advantages=1.0)] * spec.rows_multiple
    for payload in (build_forward_payload(samples, spec), build_train_payload(samples, spec)):
        validate_payload(payload, dp_size=spec.dp_size, grad_accum_steps=spec.grad_accum_steps)
        # 0.1.4's run_pipeline: `"cu_seqlens" in meta` = already packed, so it does not unpad the rows
        assert ("cu_seqlens" in payload.meta) is unpacked
        assert payload.meta.get("cu_seqlens") is None


def test_builtin_loss_payloads_stay_packed_and_need_one_row_per_micro_batch() -> None:
    import dataclasses

    from arctic_rl_core.config import ConfigError
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_sft_payload, build_train_payload

    with pytest.raises(ConfigError) as refused:
        load_config(GSM8K, [*SDPA, "loss.loss_fn=verl_grpo"])  # micro-batch 8
    (issue,) = refused.value.issues
    assert issue.path == "batch.micro_batch_size_per_gpu" and issue.value == 8
    assert "attend to each other" in issue.problem
    assert "loss.loss_fn=arctic_rl_core" in issue.remedy and "micro_batch_size_per_gpu=1" in issue.remedy
    cfg = load_config(GSM8K, [*SDPA, "loss.loss_fn=verl_grpo", "batch.micro_batch_size_per_gpu=1"])
    spec = PayloadSpec.from_config(cfg, pad_token_id=0)
    samples = [RolloutSample([3, 4], [5, 6], old_logprobs=[-1.0, -1.0], advantages=1.0)] * spec.rows_multiple
    # verl_grpo reads response_lens / sequence_offsets of the packed layout: one row per micro-batch
    assert "cu_seqlens" not in build_train_payload(samples, spec).meta
    sft = dataclasses.replace(spec, loss_fn="sft")
    assert "cu_seqlens" not in build_sft_payload(samples, sft).meta  # the SFT pipeline never packs


# -- the attention kernel of a server that runs from this environment ------------------------------


def test_a_local_server_without_flash_attn_is_refused_before_anything_starts() -> None:
    """The locked GPU environment no longer compiles flash-attn (`--extra flash` does): a flash attention
    run of the in-process Ray server or a launched local server fails before a job is created, naming
    the fix; sdpa (rows unpacked) and a remote server's own environment are not checked here."""
    from importlib.metadata import PackageNotFoundError, version

    from arctic_rl_core.backends import arctic_compat
    from arctic_rl_core.backends.arctic import ArcticBackend

    with pytest.raises(PackageNotFoundError):
        version("flash-attn")  # not in the CPU test environments
    cfg = load_config(GSM8K)  # ray, flash_attention_2 with ZoRRo
    with pytest.raises(arctic_compat.ArcticUnavailableError) as refused:
        ArcticBackend.from_config(cfg)
    assert "flash-attn is not installed in this environment" in str(refused.value)
    assert "--extra flash" in str(refused.value) and "attn_implementation=sdpa" in str(refused.value)
    local_http = load_config(GSM8K, ["backend.kind=http", "backend.launch_local_server=true"])
    with pytest.raises(arctic_compat.ArcticUnavailableError, match="flash-attn is not installed"):
        arctic_compat.require_attention_kernel(local_http.to_client_config(), "flash_attention_2")
    remote = load_config(GSM8K, ["backend.kind=http"])
    arctic_compat.require_attention_kernel(remote.to_client_config(), "flash_attention_2")  # not visible here
    sdpa = load_config(GSM8K, SDPA_CORE_LOSS)
    arctic_compat.require_attention_kernel(sdpa.to_client_config(), "sdpa")


# -- the rendezvous ports of a launched local HTTP server --------------------------------------------


def test_a_launched_local_server_starts_without_the_exported_master_port(monkeypatch) -> None:
    """0.1.4's HTTP server reads MASTER_PORT for both DeepSpeed jobs (29500 / 29501 only without it):
    the client launches it (a copy of this environment) while MASTER_PORT is out, then it is back."""
    import os

    from arctic_rl_core.backends import arctic_compat

    seen = []
    api = arctic_compat.load_client_api()

    class Client:
        def __init__(self, config, server_state=None):
            seen.append(os.environ.get("MASTER_PORT"))  # what the launched server's environment copies

    monkeypatch.setattr(arctic_compat, "load_client_api", lambda: dataclass_replace(api, async_client=Client))
    monkeypatch.setenv("MASTER_PORT", "29555")
    launched = load_config(GSM8K, [*KL, "backend.kind=http", "backend.launch_local_server=true"])
    arctic_compat.create_client(launched.to_client_config())
    assert seen == [None] and os.environ["MASTER_PORT"] == "29555"
    no_log_prob_job = load_config(GSM8K, ["backend.kind=http", "backend.launch_local_server=true"])
    arctic_compat.create_client(no_log_prob_job.to_client_config())
    assert seen == [None, "29555"]  # one DeepSpeed job: nothing to keep apart


def dataclass_replace(instance, **changes):
    import dataclasses

    return dataclasses.replace(instance, **changes)

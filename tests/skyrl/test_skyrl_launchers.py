"""`python -m adapter_skyrl.main --dry-run` (and `--help`, and through SkyRL's main_base), fed the real
command lines of SkyRL's stock GSM8K example and of the seed integration's five launchers, as recorded
from them (launchers/README.md); only the entry point is changed."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml
from adapter_skyrl.main import USAGE, dry_run, main

LAUNCHERS = Path(__file__).parent / "launchers"
RECORDED = json.loads((LAUNCHERS / "recorded_commands.json").read_text())  # see launchers/README.md
SEED = sorted(name for name in RECORDED if name.startswith("seed_"))


def recorded_command(name: str, tmp_path: Path) -> list[str]:
    """The framework arguments the launcher `name` passed to its Python entry point, as recorded, run
    from `tmp_path` (its data folder made with GSM8K's train size); the seed's entry point removed."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in ("train.parquet", "validation.parquet", "val.parquet"):  # 7473 rows: GSM8K's train size
        pq.write_table(pa.table({"prompt": ["q"] * 7473}), data / file)
    args = [arg.replace("@HOME@", str(tmp_path)) for arg in RECORDED[name]]
    # The one change: our entry point instead of the seed's (the FSDP baseline names none).
    return [a for a in args if not a.startswith("trainer.override_entrypoint=")]


def run_dry(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def document_of(stdout: str) -> dict:
    return yaml.safe_load(stdout.split("Arctic RL run settings", 1)[0])


def test_help_prints_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out == USAGE


def test_dry_run_prints_exactly_what_config_show_prints_and_the_settings_table(tmp_path, capsys):
    from adapter_skyrl.config import parse_cli, translate
    from arctic_rl_core.config import load_config

    args = ["trainer.algorithm.policy_loss_type=dual_clip", "trainer.logger=console"]
    code, out, err = run_dry(args)
    assert code == 0, err
    head, table = out.split("Arctic RL run settings", 1)
    document = yaml.safe_load(head)
    assert list(document) == ["config", "plan"]
    # `arctic-rl config show` of a file holding the settings the SkyRL run resolved to prints the same bytes
    arctic = translate(parse_cli(args), steps_per_epoch=None).arctic
    explicit = arctic.model_dump(mode="json", exclude_unset=True)
    (tmp_path / "resolved.yaml").write_text(yaml.safe_dump(explicit))
    assert load_config(tmp_path / "resolved.yaml") == arctic
    from arctic_rl_core.cli.main import main as arctic_rl

    assert arctic_rl(["config", "show", str(tmp_path / "resolved.yaml")]) == 0
    assert capsys.readouterr().out == head
    assert "backend                      ray: the Arctic server's jobs on the local Ray cluster" in table
    assert "GPUs                         train 1 / sample 1 (1 engine(s) x TP 1) / log-prob 1" in table


def test_dry_run_lists_every_problem_at_once_and_exits_2():
    code, out, err = run_dry(
        [
            "trainer.logger=console",
            "trainer.policy.model.path=Qwen/Qwen3-0.6B",
            "trainer.policy.model.lora.rank=8",  # SkyRL setting
            "trainer.arctic_rl.zorro.enabel=true",  # core key
            "trainer.arctic_rl.deepspeed.offload_param=true",  # core validation (needs ZeRO-3)
            "generator.max_input_length=100",  # SkyRL's own validate_cfg
        ]
    )
    assert code == 2 and out == ""
    assert err.startswith("4 problems in the SkyRL config for the Arctic path:\n")
    for text in (
        "lora.rank (core peft.lora_rank) = 8: arctic-platform 0.1.4's on-prem server trains dense only",
        "zorro.enabel",
        "deepspeed.offload_param = true",
        "max_input_length",
    ):
        assert text in err, err


def test_dry_run_through_skyrl_main_base(monkeypatch, capsys):
    from skyrl.train.entrypoints import main_base

    argv = [
        "main_base",
        "trainer.override_entrypoint=adapter_skyrl.main",
        "--dry-run",
        "trainer.logger=console",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        main_base.main()
    assert info.value.code == 0
    document = document_of(capsys.readouterr().out)
    assert document["config"]["backend"]["kind"] == "ray"


def test_stock_gsm8k_example_with_the_switch(tmp_path):
    """SkyRL's examples/train/gsm8k/run_gsm8k.sh, NUM_GPUS=4 default, LOGGER=console (its own knob)."""
    args = recorded_command("stock_run_gsm8k.sh", tmp_path)
    code, out, err = run_dry(args)
    assert code == 0, err  # no problem at all (the allowance is one)
    document = document_of(out)
    cfg, plan = document["config"], document["plan"]
    place = cfg["placement"]
    assert (place["training_gpus"], place["sampling_gpus"], place["log_prob_gpus"]) == (4, 4, 4)
    assert place["colocate"] is True and place["sampling_tensor_parallel_size"] == 1
    assert cfg["vllm"]["gpu_memory_utilization"] == 0.8
    assert (cfg["batch"]["prompts_per_step"], cfg["batch"]["mini_batch_prompts"]) == (1024, 256)
    assert cfg["batch"]["rollouts_per_prompt"] == 5 and cfg["optimizer"]["lr"] == 1e-6
    loss = cfg["loss"]
    assert (loss["use_kl_loss"], loss["kl_loss_coef"], loss["kl_loss_type"]) == (True, 0.001, "k3")
    assert cfg["model"]["name"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg["checkpoint"]["path"] == f"{tmp_path}/ckpts/gsm8k_1.5B_ckpt"
    assert plan["jobs"]["sampling"]["vllm_config"]["tensor_parallel_size"] == 1
    assert (loss["loss_fn"], loss["policy_loss"]) == ("arctic_rl_core", "ppo_clip")  # SkyRL's regular


# What the seed sent (its `build_rl_config`, read by hand for each launcher's defaults) where the plan
# must agree: GPUs, colocation, TP, vLLM memory, ZeRO, offload, ZoRRo, micro-batch, lr.
SEED_SENT = {
    # The seed itself stops here: mini-batch 16 rows / 8 GPUs = 2 per rank, not a whole ZoRRo group of 4
    # (its `assert mini_per_dp % train_micro_batch_size_per_gpu == 0`); the dry run names the fix.
    "seed_run_bird_grpo_smoke.sh": "seed fails",
    "seed_run_gsm8k_grpo_4gpu.sh": dict(train=2, sample=1, colocate=False, tp=1, mem=0.7, zero=2, offload=False,
                                        zorro=True, micro=4, lr=1.7e-6),
    "seed_run_bird_grpo_8b_32gpu.sh": None,
    "seed_run_bird_grpo_32b_32gpu.sh": None,
    "seed_run_bird_grpo_32b_32gpu_fsdp.sh": None,
}  # fmt: skip


@pytest.mark.parametrize("script", SEED, ids=lambda name: name.removesuffix(".sh"))
def test_seed_launchers_pass_the_dry_run(script, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "test-key-not-used")  # SkyRL's validate_cfg demands one for wandb
    args = recorded_command(script, tmp_path)
    code, out, err = run_dry(args)
    want = SEED_SENT[script]
    if want == "seed fails":
        assert code == 2 and err.startswith("1 problem in the SkyRL config"), err
        assert (
            "a mini-batch has 4 prompts x 4 rollouts = 16 rows, not divisible by data-parallel size 8" in err
        )
        code, out, err = run_dry([*args, "trainer.policy_mini_batch_size=8", "trainer.train_batch_size=8"])
        assert code == 0, err
        assert document_of(out)["config"]["batch"]["micro_batch_size_per_gpu"] == 4  # whole groups of 4
        return
    assert code == 0, err
    document = document_of(out)
    cfg = document["config"]
    if want is None:
        assert cfg["backend"]["kind"] == "ray"
        return
    place = cfg["placement"]
    assert (place["training_gpus"], place["sampling_gpus"], place["colocate"]) == (
        want["train"],
        want["sample"],
        want["colocate"],
    )
    assert place["sampling_tensor_parallel_size"] == want["tp"]
    assert cfg["vllm"]["gpu_memory_utilization"] == want["mem"]
    ds = cfg["deepspeed"]
    assert (ds["zero_stage"], ds["offload_optimizer"]) == (want["zero"], want["offload"])
    assert cfg["zorro"]["enable"] is want["zorro"]
    assert cfg["batch"]["micro_batch_size_per_gpu"] == want["micro"]
    assert cfg["optimizer"]["lr"] == want["lr"]

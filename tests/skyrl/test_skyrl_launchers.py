"""`python -m adapter_skyrl.main --dry-run` (and `--help`, and through SkyRL's main_base), fed the real
command lines of every example launcher of SkyRL (the release tag's and the default branch's) and of the
legacy integration's five launchers, as recorded from them (launchers/README.md); only the entry point is
changed. Each stock launcher ends as `launchers/expected_outcomes.json` says: a pass, or a refusal of
exactly the named fields, each of a refused kind whose reason the README lists (~25 s for all, in
process)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml
from adapter_skyrl.main import USAGE, dry_run, main

LAUNCHERS = Path(__file__).parent / "launchers"
REPO = Path(__file__).resolve().parents[2]
README = (
    REPO / "packages" / "adapter-skyrl" / "README.md"
)  # its launcher figures and the legacy integration's table
RECORDED = json.loads((LAUNCHERS / "recorded_commands.json").read_text())  # see launchers/README.md
LEGACY = sorted(name for name in RECORDED if name.startswith("legacy_"))


def recorded_command(name: str, tmp_path: Path) -> list[str]:
    """The framework arguments the launcher `name` passed to its Python entry point, as recorded, run
    from `tmp_path` (its data folder made with GSM8K's train size); the legacy entry point removed."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in ("train.parquet", "validation.parquet", "val.parquet"):  # 7473 rows: GSM8K's train size
        pq.write_table(pa.table({"prompt": ["q"] * 7473}), data / file)
    args = [arg.replace("$HOME", str(tmp_path)) for arg in RECORDED[name]]
    # The one change: our entry point instead of the legacy one (the FSDP baseline names none).
    return [a for a in args if not a.startswith("trainer.override_entrypoint=")]


def run_dry(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = dry_run(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def document_of(stdout: str) -> dict:
    return yaml.safe_load(stdout.split("Arctic RL run settings", 1)[0])


EXPECTED = json.loads((LAUNCHERS / "expected_outcomes.json").read_text())
NOT_TRAINERS = json.loads((LAUNCHERS / "not_trainer_launchers.json").read_text())


def test_every_recorded_stock_launcher_has_an_expected_outcome():
    from skyrl_launcher_data import stock_launchers

    assert sorted(EXPECTED["launchers"]) == stock_launchers()
    assert not set(EXPECTED["launchers"]) & set(NOT_TRAINERS["launchers"])
    used = {
        kind
        for outcome in EXPECTED["launchers"].values()
        if outcome != "pass"
        for kind in outcome["refused"].values()
    }
    assert used == set(EXPECTED["kinds"])  # every kind listed is one a launcher meets, and only those


@pytest.mark.parametrize("name", sorted(EXPECTED["launchers"]))
def test_every_stock_launcher_ends_as_expected(name, tmp_path, monkeypatch):
    """The launcher's own settings, only the entry point switched (adapter_skyrl.dapo for SkyRL's DAPO
    example entry points, adapter_skyrl.main for every other), no data files: a pass, or exactly the
    expected refusals, each naming its field, value and fix with its kind's reason."""
    from skyrl_launcher_data import dry_run_launcher, problem_paths

    monkeypatch.setenv("WANDB_API_KEY", "unused")  # SkyRL's validate_cfg wants one for logger=wandb
    code, _, err = dry_run_launcher(name, tmp_path)
    expected = EXPECTED["launchers"][name]
    if expected == "pass":
        assert code == 0, err
        return
    assert code == 2, "passed, expected refusals"
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert sorted(problem_paths(err)) == sorted(expected["refused"]), err
    for path, line in zip(problem_paths(err), problems, strict=True):
        kind = expected["refused"][path]
        assert EXPECTED["kinds"][kind]["says"] in line and ". Fix: " in line, (kind, line)


def test_the_readme_states_the_launcher_figures():
    """The README's figures are the expected outcomes' (launchers per source, passes, refusals by kind)."""
    outcomes = EXPECTED["launchers"]
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("### SkyRL's example launchers") :]
    section = section[: section.index("\n### ", 10)]
    for source in ("v0.4.0", "head"):
        names = [n for n in outcomes if n.startswith(source + "/")]
        passes = sum(outcomes[n] == "pass" for n in names)
        assert f"| {source} | {len(names)} | {passes} | {len(names) - passes} |" in section
    for kind, about in EXPECTED["kinds"].items():
        count = sum(kind in o["refused"].values() for o in outcomes.values() if o != "pass")
        assert f"| {kind} | {count} | {about['why']} |" in section, kind


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
    from skyrl_launcher_data import launcher_overrides, write_training_files

    args = [*launcher_overrides("head/examples/train/gsm8k/run_gsm8k.sh", tmp_path), "trainer.logger=console"]
    write_training_files(args, rows=7473)  # GSM8K's train size
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


# What the legacy integration sent: its `build_rl_config` output for each launcher (launchers/legacy_sent.json,
# recorded once by running its own function; see launchers/README.md), compared field by field with the
# 0.1.4 client config our plan carries (`plan.client`). Where each legacy field lives in 0.1.4's shape
# (longest prefix wins); None: 0.1.4's on-prem client config has no such field.
SENT = json.loads((LAUNCHERS / "legacy_sent.json").read_text())
SMOKE_FIX = ["trainer.policy_mini_batch_size=8", "trainer.train_batch_size=8"]
LEGACY_FIELD_IN_0_1_4 = {
    "backend": "backend.type",
    "comm_protocol": "backend.protocol",
    "colocate": "backend.colocate",
    "checkpoint_path": "training.checkpoint_path",
    "full_determinism": "training.full_determinism",
    "ds_config": "training.ds_config",
    "ds_worker_config": "training.ds_worker_config",
    "vllm_config": "sampling.vllm",
    "arctic_inference_config": "sampling.arctic_inference_config",
    "log_prob_engine": "sampling.log_prob_engine",
    "startup_timeout": "job_ready_timeout",
    "server_logs": None,
    "training_config": None,
    "training_config.max_length": "max_seq_len",
    "training_config.attn_implementation": "training.ds_worker_config.attn_implementation",
    "training_config.optimizer.lr": "training.ds_config.optimizer.params.lr",
    "training_config.optimizer.betas": "training.ds_config.optimizer.params.betas",
    "training_config.optimizer.weight_decay": "training.ds_config.optimizer.params.weight_decay",
    "training_config.optimizer.gradient_clipping": "training.ds_config.gradient_clipping",
}
MISSING = "(not sent)"
# Every field where our plan differs from what the legacy integration sent (its name where 0.1.4 has no such field),
# with the row of the README's field-by-field table that says why, and what ours must be.
LEGACY_DIFFERENCES = {
    "backend.type": ("`backend.type`", lambda ours, legacy: (legacy, ours) == ("local", "onprem")),
    "sampling.log_prob_engine": ("`log_prob_engine`", lambda ours, legacy: ours == "deepspeed"),
    "job_ready_timeout": ("`job_ready_timeout`", lambda ours, legacy: (legacy, ours) == (300.0, 1800.0)),
    "request_timeout": ("`job_ready_timeout`", lambda ours, legacy: ours == 1800.0),
    "server_logs": ("`server_logs`", lambda ours, legacy: ours == MISSING),
    "sampling.arctic_inference_config": (
        "`arctic_inference_config`",
        lambda ours, legacy: legacy is None and ours["zorro_inference"] == {"enable": True},
    ),
    "training.ds_config.zero_optimization.offload_optimizer.device": (
        "`offload_optimizer` / `offload_param`",
        lambda ours, legacy: (legacy, ours) == ("none", MISSING),
    ),
    "training.ds_config.zero_optimization.offload_param.device": (
        "`offload_optimizer` / `offload_param`",
        lambda ours, legacy: (legacy, ours) == ("none", MISSING),
    ),
    "training.ds_config.zero_optimization.stage": (
        "`zero_optimization.stage`",
        lambda o, s: (s, o) == (0, 2),
    ),
    "backend.colocate": ("`backend.colocate`", lambda ours, legacy: (legacy, ours) == (False, True)),
    "training.ds_config.optimizer.params.torch_adam": (
        "`optimizer.params.torch_adam`",
        lambda ours, legacy: (legacy, ours) == (MISSING, True),
    ),
    "training.ds_worker_config.logits_compute_in_fp32": (
        "`logits_compute_in_fp32`",
        lambda ours, legacy: (legacy, ours) == (False, True),
    ),
    "sampling.vllm.enforce_eager": ("`enforce_eager`", lambda ours, legacy: (legacy, ours) == (True, False)),
    "sampling.vllm.max_num_seqs": ("`max_num_seqs`", lambda ours, legacy: (legacy, ours) == (256, 1024)),
    "sampling.vllm.max_num_batched_tokens": (
        "`max_num_batched_tokens`",
        lambda ours, legacy: (legacy, ours) == (MISSING, 8192),
    ),
    "sampling.vllm.logprobs_mode": (
        "`logprobs_mode`",
        lambda ours, legacy: (legacy, ours) == (MISSING, "processed_logprobs"),
    ),
    "sampling.vllm.compilation_config.cudagraph_mode": (
        "`compilation_config.cudagraph_mode`",
        lambda ours, legacy: (legacy, ours) == (MISSING, "PIECEWISE"),
    ),
    **{
        f"training.ds_config.{key}": (
            "`torch_autocast`, `data_types`",
            lambda ours, legacy, v=value: ours == v,
        )
        for key, value in (
            ("torch_autocast.enabled", False),
            ("data_types.grad_accum_dtype", "fp32"),
            ("communication_data_type", "fp32"),
        )
    },
    "training.ds_worker_config.use_autocast": ("`torch_autocast`, `data_types`", lambda o, s: o is False),
    "training.cuda_ipc": ("`cuda_ipc`, `low_memory`", lambda ours, legacy: legacy == MISSING),
    "training.low_memory": ("`cuda_ipc`, `low_memory`", lambda ours, legacy: legacy == MISSING),
    "sampling.log_prob_ds_config": ("`log_prob_ds_config`", lambda ours, legacy: ours is None),
    **{
        f"training_config.{key}": ("`training_config`", lambda ours, legacy: ours == MISSING)
        for key in ("lr_scheduler.type", "lr_scheduler.warmup_ratio", "training_horizon", "model_config")
    },
    **{
        f"training.ds_config.scheduler.{key}": ("`training_config`", lambda ours, legacy: legacy == MISSING)
        for key in (
            "type",
            "params.warmup_min_lr",
            "params.warmup_max_lr",
            "params.warmup_num_steps",
            "params.warmup_type",
        )
    },
}


def _leaves(data, prefix: str = ""):
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], data


def _in_0_1_4(legacy_path: str) -> str | None:
    for prefix in sorted(LEGACY_FIELD_IN_0_1_4, key=len, reverse=True):
        if legacy_path == prefix or legacy_path.startswith(prefix + "."):
            target = LEGACY_FIELD_IN_0_1_4[prefix]
            return None if target is None else target + legacy_path[len(prefix) :]
    return legacy_path  # the same name in 0.1.4 (model_name, seed, *_gpus)


def _get(data: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return MISSING
        data = data[part]
    return data


def legacy_differences(sent: dict, client: dict) -> dict[str, tuple]:
    """Every field where `client` (our plan's 0.1.4 client config) differs from what the legacy integration `sent`:
    name -> (ours, its value); each legacy leaf looked up where 0.1.4 keeps it, each of our leaves
    that no legacy field covers compared with "not sent"."""
    out, covered = {}, set()
    for path, legacy in _leaves(sent):
        target = _in_0_1_4(path)
        ours = MISSING if target is None else _get(client, target)
        covered.add(target)
        if ours != legacy:
            out[target or path] = (ours, legacy)
    for path, ours in _leaves(client):
        if not any(path == c or path.startswith(c + ".") for c in covered if c):
            out[path] = (ours, MISSING)
    return out


@pytest.mark.parametrize(
    "script", [*LEGACY, "legacy_run_bird_grpo_smoke.sh + fix"], ids=lambda name: name.removesuffix(".sh")
)
def test_legacy_launchers_send_what_the_legacy_integration_sent_but_where_the_readme_says_why(
    script, tmp_path, monkeypatch
):
    """The legacy integration's five launchers with only the entry point changed pass `--dry-run` (the smoke launcher
    after the one fix the legacy integration itself needs), and the plan's client config equals its
    `build_rl_config` field by field except where the README's table says why ours is better."""
    monkeypatch.setenv("WANDB_API_KEY", "test-key-not-used")  # SkyRL's validate_cfg demands one for wandb
    name, fixed = script.removesuffix(" + fix"), script.endswith(" + fix")
    args = recorded_command(name, tmp_path)
    code, out, err = run_dry(args)
    if name == "legacy_run_bird_grpo_smoke.sh":
        # the legacy integration itself stops here, in build_rl_config's assert: mini-batch 16 rows / 8 GPUs = 2 per
        # rank, not a whole ZoRRo group of 4. ZoRRo is our default, not the launcher's setting: off,
        # said aloud, and SkyRL's own micro-batch (1 row) trains the 2 rows each rank gets
        assert SENT[name]["assertion"].startswith("per-DP-rank mini-batch (2) must be divisible")
        assert code == 0, err
        assert (
            "notice: ZoRRo off: trainer.policy_mini_batch_size=4 prompts do not split into whole prompt "
            in out
        )
        assert (
            document_of(out)["plan"]["client"]["training"]["ds_config"]["train_micro_batch_size_per_gpu"] == 1
        )
        if not fixed:
            return
        code, out, err = run_dry([*args, *SMOKE_FIX])
        name = f"{name} {' '.join(SMOKE_FIX)}"
    assert code == 0, err
    document = document_of(out)
    client, shape = document["plan"]["client"], document["plan"]["shape"]
    sent = json.loads(json.dumps(SENT[name]).replace("$HOME", str(tmp_path)))
    differing = legacy_differences(sent, client)
    unexplained = {k: v for k, v in differing.items() if k not in LEGACY_DIFFERENCES}
    assert not unexplained, unexplained
    for path, (ours, legacy) in differing.items():
        assert LEGACY_DIFFERENCES[path][1](ours, legacy), (path, ours, legacy)
    # the fields the legacy integration's users tune by hand, equal (GPUs, TP, memory, batch shape, ZeRO, ZoRRo, lr)
    for path in (
        "training_gpus", "sampling_gpus", "log_prob_gpus", "model_name", "seed", "max_seq_len",
        "training.checkpoint_path", "sampling.vllm.tensor_parallel_size", "sampling.vllm.gpu_memory_utilization",
        "training.ds_config.train_batch_size", "training.ds_config.train_micro_batch_size_per_gpu",
        "training.ds_config.gradient_accumulation_steps", "training.ds_config.optimizer.params.lr",
        "training.ds_worker_config.max_token_len", "training.ds_worker_config.zorro_train_enable",
    ):  # fmt: skip
        assert path not in differing, (path, differing.get(path))
    # the legacy warmup (training_config, which 0.1.4's on-prem client cannot send) is a DeepSpeed
    # schedule over the run's own optimizer steps
    ratio = sent["training_config"]["lr_scheduler"]["warmup_ratio"]
    scheduler = client["training"]["ds_config"].get("scheduler")
    if ratio:
        assert scheduler["params"]["warmup_num_steps"] == round(ratio * shape["training_horizon"]) > 0
    else:
        assert scheduler is None
    # the legacy sync knobs (sent per sync_weights call) are 0.1.4's TrainingConfig fields
    knobs = {a.split("=")[0]: a.split("=")[1] for a in args if a.startswith("trainer.arctic_rl.")}
    for knob, field in (("cuda_ipc_weight_sync", "cuda_ipc"), ("low_memory_weight_sync", "low_memory")):
        assert client["training"][field] is (knobs.get(f"trainer.arctic_rl.{knob}", "false") == "true")
    readme = README.read_text(encoding="utf-8")
    table = readme[readme.index("### Coming from the SkyRL integration") :]
    table = table[table.index("Field by field") : table.index("<!-- skyrl-legacy-keys:start -->")]
    for path in differing:
        assert f"| {LEGACY_DIFFERENCES[path][0]} |" in table, path

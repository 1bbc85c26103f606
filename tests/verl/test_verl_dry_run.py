"""`python -m adapter_verl.main --dry-run`: verl's stock GRPO example plus the one switch, every
problem of a bad command line at once (exit 2), `--help`, and the pieces the launcher rewrites
(hydra.searchpath, +remote_backend=arctic, rollout.name=vllm). No Ray is started."""

from __future__ import annotations

import pytest
import yaml

# The settings of verl's stock examples/grpo_trainer/run_qwen2-7b.sh (verl repository), the entry
# point switched from `python3 -m verl.trainer.main_ppo` to `python -m adapter_verl.main`.
STOCK_QWEN2_7B = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=/data/gsm8k/train.parquet",
    "data.val_files=/data/gsm8k/test.parquet",
    "data.train_batch_size=1024",
    "data.max_prompt_length=512",
    "data.max_response_length=1024",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0",
    'trainer.logger=["console","wandb"]',
    "trainer.project_name=verl_grpo_example_gsm8k",
    "trainer.experiment_name=qwen2_7b_function_rm",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=20",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
]


def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    from adapter_verl.main import main

    with pytest.raises(SystemExit) as info:
        main(["--dry-run", *argv])
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def document(out: str) -> tuple[dict, str]:
    """The printed `config:`/`plan:` document and the settings table after it."""
    head, _, table = out.partition("Arctic RL run settings")
    return yaml.safe_load(head), table


def test_stock_grpo_example_plus_the_switch_passes_and_carries_its_settings(capsys, tmp_path):
    import ray

    code, out, err = dry_run(capsys, *STOCK_QWEN2_7B, f"trainer.default_local_dir={tmp_path}/ckpt")
    assert code == 0, err
    assert not ray.is_initialized()
    doc, table = document(out)
    cfg, plan = doc["config"], doc["plan"]
    assert cfg["backend"]["kind"] == "ray" and cfg["model"]["name"] == "Qwen/Qwen2-7B-Instruct"
    place = cfg["placement"]
    # 1 node x 8 GPUs, hybrid engine = colocated, TP 2 -> four engines; the KL reference on the same GPUs
    assert (place["training_gpus"], place["sampling_gpus"], place["log_prob_gpus"]) == (8, 8, 8)
    assert place["colocate"] is True and place["sampling_tensor_parallel_size"] == 2
    assert plan["shape"]["num_sampling_engines"] == 4
    assert cfg["vllm"]["gpu_memory_utilization"] == 0.6
    batch = cfg["batch"]
    assert (batch["prompts_per_step"], batch["mini_batch_prompts"], batch["rollouts_per_prompt"]) == (
        1024,
        256,
        5,
    )
    assert (batch["micro_batch_size_per_gpu"], batch["max_prompt_length"], batch["max_response_length"]) == (
        40,
        512,
        1024,
    )
    # 256 x 5 = 1280 rows per optimizer step = 40 x 4 accumulation steps x 8 data-parallel ranks
    assert (plan["shape"]["train_batch_size"], plan["shape"]["gradient_accumulation_steps"]) == (1280, 4)
    assert cfg["optimizer"]["lr"] == 1e-6 and cfg["optimizer"]["weight_decay"] == 0.01  # verl's default
    loss = cfg["loss"]
    assert (loss["use_kl_loss"], loss["kl_loss_coef"], loss["kl_loss_type"], loss["entropy_coeff"]) == (
        True,
        0.001,
        "low_var_kl",
        0.0,
    )
    assert cfg["checkpoint"]["path"] == f"{tmp_path}/ckpt"
    client = plan["client"]
    assert (client["training_gpus"], client["sampling_gpus"], client["log_prob_gpus"]) == (8, 8, 8)
    assert client["backend"] == {"type": "onprem", "protocol": "ray", "colocate": True}
    assert client["sampling"]["vllm"]["tensor_parallel_size"] == 2
    assert client["sampling"]["vllm"]["gpu_memory_utilization"] == 0.6
    assert client["training"]["ds_config"]["optimizer"]["params"]["lr"] == 1e-6
    # the table: GPUs, colocation, and what verl set that the Arctic path does not use
    assert "train 8 / sample 8 (4 engine(s) x TP 2) / log-prob 8" in table
    assert "actor_rollout_ref.ref.fsdp_config.param_offload = true" in table
    assert "actor_rollout_ref.rollout.name=vllm: now arctic" in err


def test_the_document_is_what_arctic_rl_config_show_prints(capsys, tmp_path, monkeypatch):
    """`arctic-rl config show` over the same core config prints the same text (its loader is
    handed the config the dry run resolved)."""
    import arctic_rl_core.cli.commands.config as config_command
    from adapter_verl.main import check
    from arctic_rl_core.cli.main import main as arctic_rl

    argv = [*STOCK_QWEN2_7B, f"trainer.default_local_dir={tmp_path}/ckpt"]
    code, out, err = dry_run(capsys, *argv)
    assert code == 0, err
    resolved = check(argv).resolution.config
    monkeypatch.setattr(config_command, "_load", lambda args: resolved)
    capsys.readouterr()
    assert arctic_rl(["config", "show", "unused.yaml"]) in (0, None)
    assert out.partition("Arctic RL run settings")[0] == capsys.readouterr().out


def test_other_shapes_of_our_own(capsys):
    """Cases not in the repository: two nodes of four GPUs, TP 4, a different memory fraction,
    no KL; a standalone rollout pool."""
    base = [o for o in STOCK_QWEN2_7B if not o.startswith(("trainer.n", "actor_rollout_ref.rollout.tensor"))]
    code, out, err = dry_run(
        capsys,
        *base,
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.35",
        "actor_rollout_ref.actor.use_kl_loss=false",
    )
    assert code == 0, err
    cfg, plan = document(out)[0].values()
    assert (cfg["placement"]["training_gpus"], cfg["placement"]["log_prob_gpus"]) == (8, 0)
    assert plan["shape"]["num_sampling_engines"] == 2 and cfg["vllm"]["gpu_memory_utilization"] == 0.35

    code, out, err = dry_run(
        capsys,
        *base,
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.hybrid_engine=false",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=20",
    )
    assert code == 0, err
    place = document(out)[0]["config"]["placement"]
    assert (place["training_gpus"], place["sampling_gpus"], place["colocate"]) == (4, 4, False)


def test_bad_settings_are_all_reported_in_one_round(capsys):
    """verl-side rejections, verl's own check and core validation together, exit 2, no Ray."""
    import ray

    code, out, err = dry_run(
        capsys,
        *STOCK_QWEN2_7B,
        "+remote_backend.core.zorro.enabel=true",  # misspelt core knob
        "actor_rollout_ref.rollout.tensor_model_parallel_size=3",  # 8 GPUs do not split into TP-3 engines
        "actor_rollout_ref.model.lora_rank=16",
        "trainer.default_local_dir=",  # no checkpoint folder: the server 400s without one
    )
    assert code == 2 and out == ""
    assert not ray.is_initialized()
    problems = [line[4:] for line in err.splitlines() if line.startswith("  - ")]
    text = "\n".join(problems)
    for expected in (
        "remote_backend.core.zorro.enabel = true: unknown key. Fix: did you mean '+remote_backend.core.zorro.enable'?",
        "not divisible by placement.sampling_tensor_parallel_size=3",
        "actor_rollout_ref.model.lora_rank (core peft.lora_rank) = 16: arctic-platform 0.1.4's on-prem server "
        "trains dense only",
    ):
        assert expected in text, text
    assert "problems in the settings" in err


def test_help_prints_usage(capsys):
    from adapter_verl.main import main

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m adapter_verl.main [--dry-run]") and "--dry-run" in out


def test_a_users_searchpath_is_merged_and_ours_wins(capsys, tmp_path):
    """A user's own Hydra search path (here with a same-named `remote_backend/arctic.yaml`, as the
    legacy integration ships) keeps its groups; the adapter's group is found first."""
    from adapter_verl.main import compose, prepare

    mine = tmp_path / "conf"
    (mine / "remote_backend").mkdir(parents=True)
    (mine / "remote_backend" / "arctic.yaml").write_text("colocate: true\n")
    (mine / "extra_group").mkdir()
    (mine / "extra_group" / "mine.yaml").write_text("answer: 42\n")
    prepared = prepare([f"hydra.searchpath=[file://{mine}]", "+extra_group=mine"])
    assert f"hydra.searchpath=[pkg://adapter_verl.hydra_config,file://{mine}]" in prepared.overrides
    cfg = compose(prepared.overrides)
    assert cfg.extra_group.answer == 42
    assert cfg.remote_backend.core.backend.kind == "ray" and "colocate" not in cfg.remote_backend


def test_remote_backend_group_selection(capsys):
    from adapter_verl.main import compose, prepare

    plain = prepare(["remote_backend=arctic"])
    assert "+remote_backend=arctic" in plain.overrides and not plain.problems
    assert compose(plain.overrides).remote_backend.core.backend.kind == "ray"
    other = prepare(["+remote_backend=mine"])
    assert other.problems == ["remote_backend=mine: the adapter's group is +remote_backend=arctic"]


def test_truncated_rollout_sampling_with_processed_logprobs_is_refused(capsys, tmp_path):
    """top-k/top-p on verl's training rollouts: vLLM's processed_logprobs (the default here, verl's
    apply_temperature distribution) renormalise over the kept tokens and the trainer's do not, so every IS
    weight sits below 1 at staleness 0: refused naming both fixes. raw_logprobs at temperature 1 (the
    trainer's full distribution whatever is kept) and truncation in validation sampling only both pass."""
    rollout = "actor_rollout_ref.rollout"
    stock = [*STOCK_QWEN2_7B, f"trainer.default_local_dir={tmp_path}/ckpt"]
    code, _, err = dry_run(capsys, *stock, f"{rollout}.top_p=0.9")
    assert code == 2
    assert f"{rollout}.top_p = 0.9: with {rollout}.top_p=0.9 the sampler's processed_logprobs" in err, err
    assert f"set {rollout}.top_p=1.0 and {rollout}.top_k=-1" in err
    assert f"{rollout}.logprobs_mode=raw_logprobs" in err
    code, _, err = dry_run(capsys, *stock, f"{rollout}.top_k=8", f"{rollout}.logprobs_mode=raw_logprobs")
    assert code == 0, err
    code, _, err = dry_run(capsys, *stock, f"{rollout}.val_kwargs.top_p=0.7", f"{rollout}.val_kwargs.top_k=5")
    assert code == 0, err


def problems_of(err: str) -> list[str]:
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")]


def test_config_path_and_name_select_verls_configs(capsys, tmp_path):
    """How verl's launchers select their config: `--config-path=config` (relative to the entry point
    they used: verl's own config folders) and `--config-name`, `=` or space separated."""
    stock = [*STOCK_QWEN2_7B, f"trainer.default_local_dir={tmp_path}/ckpt"]
    code, _, err = dry_run(capsys, "--config-path=config", "--config-name=ppo_trainer", *stock)
    assert code == 0, err
    code, _, err = dry_run(
        capsys, "--config-path", "config", "--config-name", "ppo_megatron_trainer.yaml", *stock
    )
    assert code == 2
    (problem,) = problems_of(err)
    assert problem.startswith("--config-name=ppo_megatron_trainer: verl's Megatron-Core training engine")
    assert "Fix: remove --config-name=ppo_megatron_trainer" in problem
    code, _, err = dry_run(capsys, "--config-name=ppo_trainr", *stock)
    assert code == 2
    (problem,) = problems_of(err)
    assert problem.startswith("--config-name=ppo_trainr: no such config in verl's config folders")
    assert "ppo_trainer" in problem and "fully_async_ppo_trainer" in problem


def test_a_recipes_own_config_folder_is_composed_on_top_of_verls(capsys, tmp_path):
    """A recipe's config (its `hydra.searchpath` names verl's folder relative to a verl checkout)."""
    folder = tmp_path / "recipe" / "config"
    folder.mkdir(parents=True)
    (folder / "my_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "data:\n  max_prompt_length: 256\n"
    )
    from adapter_verl.main import check

    result = check([f"--config-path={folder}", "--config-name=my_trainer", *STOCK_QWEN2_7B[:3]])
    assert result.config.data.max_prompt_length == 256  # the recipe's own value
    assert result.config.remote_backend.core.backend.kind == "ray"  # the adapter's group is found too


def test_one_step_off_launchers_run_in_the_separate_async_mode(capsys, tmp_path):
    """verl's one-step-off entry point's settings (a top-level rollout pool) -> verl's separate-async
    trainer: 1152 prompts per step in mini-batches of 192 = 6 updates per weight sync, one step stale
    (threshold 2), in the entry point's bypass mode: (2 x 6 - 1) x 1 = 11 optimizer steps of staleness."""
    from adapter_verl.main import check

    result = check(
        [
            *[o for o in STOCK_QWEN2_7B if not o.startswith(("trainer.n_gpus", "data.train_batch"))],
            "data.train_batch_size=1152",
            "actor_rollout_ref.actor.ppo_mini_batch_size=192",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.hybrid_engine=False",
            "trainer.n_gpus_per_node=6",
            "rollout.nnodes=1",
            "rollout.n_gpus_per_node=2",
            f"trainer.default_local_dir={tmp_path}/ckpt",
        ]
    )
    assert result.problems == [], result.problems
    assert result.config.trainer.v1.trainer_mode == "arctic_separate_async"
    assert result.config.trainer.v1.separate_async.parameter_sync_step == 6
    cfg = result.resolution.config
    assert (cfg.placement.training_gpus, cfg.placement.sampling_gpus, cfg.placement.colocate) == (6, 2, False)
    assert cfg.async_settings.max_staleness == 11
    assert any(
        n.startswith("actor_rollout_ref.rollout.n_gpus_per_node=2: from rollout.n_gpus_per_node")
        for n in result.notices
    )


@pytest.mark.parametrize(
    ("extra", "field", "text"),
    [
        (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator=gae", "GAE needs a critic"),
        (["data.image_key=images"], "data.image_key=images", "the arctic rollout takes token prompts only"),
        (
            ["actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct"],
            "actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct",
            "a vision-language model (qwen2_5_vl, from the name)",
        ),
        (["trainer.device=npu"], "trainer.device=npu", "Ascend NPUs are not supported"),
        (["model_engine=megatron"], "model_engine=megatron", "Megatron-Core training engine"),
        (
            ["algorithm.adv_estimator=grpoo"],
            "algorithm.adv_estimator=grpoo",
            "did you mean algorithm.adv_estimator=grpo?",
        ),
    ],
    ids=["critic", "image-data", "vl-model", "npu", "megatron", "estimator"],
)
def test_what_arctic_cannot_run_is_refused_once_naming_the_field(
    capsys, tmp_path, monkeypatch, extra, field, text
):
    """One problem each, field=value first, with the fix; with a critic verl's own check (which would
    download the critic's tokenizer) never runs."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = dry_run(capsys, *STOCK_QWEN2_7B, f"trainer.default_local_dir={tmp_path}/ckpt", *extra)
    assert code == 2
    (problem,) = problems_of(err)
    assert problem.startswith(field + ":") and text in problem and "Fix: " in problem
    assert "Traceback" not in err


def test_keys_verl_has_no_field_for_get_did_you_mean_and_the_rest_is_still_checked(capsys, tmp_path):
    code, _, err = dry_run(
        capsys,
        *STOCK_QWEN2_7B,
        f"trainer.default_local_dir={tmp_path}/ckpt",
        "data.train_batch_sise=8",  # a typo (Hydra: "Could not override")
        "+actor_rollout_ref.actor.policy_loss.tau_pos=1.0",  # SAPO's knob, where verl 0.9.1 has it not
        "actor_rollout_ref.model.path=<path_to_model>",  # a placeholder left in a launcher
        "actor_rollout_ref.rollout.tensor_model_parallel_size=3",  # checked in the same round
    )
    assert code == 2 and "Traceback" not in err
    problems = problems_of(err)
    assert problems[0].startswith(
        "actor_rollout_ref.actor.policy_loss.tau_pos=1.0: actor_rollout_ref.actor.policy_loss is a verl config class "
        "without a field 'tau_pos'"
    )
    assert "'tau_pos' lives at 'actor_rollout_ref.actor.tau_pos'" in problems[0]
    assert problems[1].startswith(
        "actor_rollout_ref.model.path=<path_to_model>: Hydra cannot parse this override"
    )
    assert problems[2] == (
        "data.train_batch_sise=8: not a field of verl 0.9.1's config. Fix: did you mean "
        "'data.train_batch_size'? Remove or rename the key"
    )
    assert any("not divisible by placement.sampling_tensor_parallel_size=3" in p for p in problems[3:])


# -- issue 32: messages, never a traceback ------------------------------------------------------


def test_a_bare_dry_run_lists_what_verl_needs_set(capsys, monkeypatch):
    """Before: verl's config class raised inside Hydra's instantiate (a 60-line traceback). verl's default
    estimator is GAE: the critic is refused first, and verl's own check (which would load the critic's
    tokenizer, a download) does not run; the rest is still listed."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = dry_run(capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert problems_of(err)[0].startswith("algorithm.adv_estimator=gae: GAE needs a critic")
    assert "ppo_micro_batch_size_per_gpu" in err


def test_values_of_the_wrong_type_are_named_before_anything_reads_them(capsys, tmp_path):
    """Before: `optim.weight_decay=1:2:3` and `trainer.n_gpus_per_node=two` were kept as text by Hydra
    and failed in the first int()/float() (a traceback)."""
    code, out, err = dry_run(
        capsys,
        *STOCK_QWEN2_7B,
        f"trainer.default_local_dir={tmp_path}/ckpt",
        "actor_rollout_ref.actor.optim.weight_decay=1:2:3",
        "trainer.n_gpus_per_node=two",
    )
    assert code == 2 and out == "" and "Traceback" not in err
    assert "2 problems in the settings" in err
    assert "actor_rollout_ref.actor.optim.weight_decay=1:2:3: YAML 1.1 reads 1:2:3 as the base-60" in err
    assert "trainer.n_gpus_per_node=two: must be a number (its default is 8)" in err


# -- issue 31: verl's settings translated, not refused ---------------------------------------------


def stock_without(*keys: str) -> list[str]:
    return [o for o in STOCK_QWEN2_7B if not o.startswith(keys)]


def test_verls_settings_are_translated_instead_of_refused(tmp_path):
    """What verl's example launchers set, served: a token budget instead of a micro-batch (verl's
    use_dynamic_bsz), parameter offload (ZeRO-3, fitted), a warmup of 0 steps, the prefix grouper and
    fused kernels, Ulysses SP; the stock model is Qwen2 (ZoRRo's 0.1.4 patch is Qwen3's): ZoRRo off with
    the reason, the load balancer fitted. Every change is a notice, none a problem."""
    from adapter_verl.main import check

    actor = "actor_rollout_ref.actor"
    result = check(
        [
            *stock_without(f"{actor}.ppo_micro_batch_size_per_gpu", f"{actor}.fsdp_config.param_offload"),
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"{actor}.use_dynamic_bsz=True",
            f"{actor}.ppo_max_token_len_per_gpu=6144",
            f"{actor}.fsdp_config.param_offload=True",
            f"{actor}.optim.lr_warmup_steps=0",
            f"{actor}.use_prefix_grouper=True",
            f"{actor}.ulysses_sequence_parallel_size=2",
            "actor_rollout_ref.model.use_fused_kernels=True",
            "algorithm.use_kl_in_reward=true",  # beside the stock KL loss: verl runs both
        ]
    )
    assert result.problems == [], result.problems
    cfg = result.resolution.config
    # 256 prompts x 5 = 1280 rows / 8 GPUs = 160 per GPU; a row is <= 512 + 1024 tokens: 8 fit the
    # 6144 x 2 (SP) = 12288-token budget, and 8 divides 160
    assert (cfg.batch.max_token_len_per_gpu, cfg.batch.micro_batch_size_per_gpu) == (12288, 8)
    assert cfg.placement.ulysses_sequence_parallel_size == 1 and cfg.shape.gradient_accumulation_steps == 20
    assert (cfg.deepspeed.offload_param, cfg.deepspeed.zero_stage) == (True, 3)
    assert (cfg.optimizer.warmup_steps, cfg.optimizer.warmup_ratio) == (None, 0.0)
    assert cfg.kernels.use_liger is True
    assert (cfg.loss.use_kl_loss, cfg.loss.use_kl_in_reward, cfg.placement.log_prob_gpus) == (True, True, 8)
    assert (cfg.zorro.enable, cfg.zorro.load_balancer, cfg.zorro.max_rollouts) == (False, True, None)
    said = "\n".join(result.notices)
    for text in (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2: the Arctic training job runs no Ulysses",
        "ZoRRo (prompt de-duplication in training) is off: arctic-platform 0.1.4's ZoRRo patch supports "
        "Qwen3-family models only, and Qwen/Qwen2-7B-Instruct is 'qwen2' (+remote_backend.core.zorro.enable=true",
        "ZeRO stage 3: actor_rollout_ref.actor.fsdp_config.param_offload=true offloads the parameters",
        "micro-batches of 8 rows from the token budget actor_rollout_ref.actor.ppo_max_token_len_per_gpu=12288",
        "algorithm.use_kl_in_reward=true with actor_rollout_ref.actor.use_kl_loss=true: the KL to the reference "
        "policy is applied twice, as verl does",
    ):
        assert text in said, said
    assert any(s.field == f"{actor}.use_prefix_grouper" for s in result.resolution.not_applicable)


def test_a_loss_the_server_does_not_compute_is_one_problem_with_the_nearest(tmp_path):
    """GMPO (geo_mean, clip 0.4): one problem naming gspo and its own clip range, no follow-on clip
    checks of a loss that does not run."""
    from adapter_verl.main import check

    actor = "actor_rollout_ref.actor"
    result = check(
        [
            *STOCK_QWEN2_7B,
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"{actor}.policy_loss.loss_mode=geo_mean",
            f"{actor}.clip_ratio_low=0.4",
            f"{actor}.clip_ratio_high=0.4",
        ]
    )
    (problem,) = result.problems
    assert problem.startswith(f'{actor}.policy_loss.loss_mode = "geo_mean": the Arctic server computes')
    assert (
        f"Fix: set {actor}.policy_loss.loss_mode=gspo" in problem
        and f"{actor}.clip_ratio_low=0.0003" in problem
    )


def test_a_group_of_one_is_warned_about_and_the_micro_batch_fitted(tmp_path):
    """rollout.n=1 with GRPO: every advantage is zero (a warning, the run is verl's to make); 256 prompts x 1
    on 8 GPUs is 32 rows a GPU, and the stock micro-batch of 40 becomes 32."""
    from adapter_verl.main import check

    result = check(
        [
            *stock_without("actor_rollout_ref.rollout.n"),
            "actor_rollout_ref.rollout.n=1",
            f"trainer.default_local_dir={tmp_path}/ckpt",
        ]
    )
    assert result.problems == [], result.problems
    assert result.resolution.config.batch.micro_batch_size_per_gpu == 32
    assert any("every advantage is zero" in n for n in result.notices), result.notices


def test_printed_fixes_are_typeable_as_given(tmp_path):
    """A core knob in a fix is spelled as a verl command line sets it."""
    from adapter_verl.main import check

    result = check(
        [
            *STOCK_QWEN2_7B,
            f"trainer.default_local_dir={tmp_path}/ckpt",
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "+remote_backend.core.deepspeed.zero_stage=2",  # the user's stage: kept, and named
        ]
    )
    (problem,) = result.problems
    assert (
        "Fix: set +remote_backend.core.deepspeed.zero_stage=3, or actor_rollout_ref.actor.fsdp_config.param_offload=false"
        in problem
    ), problem


def test_a_damaged_checkpoint_is_named_before_ray_starts(capsys, tmp_path, monkeypatch):
    """verl 0.9.1 starts from scratch without latest_checkpointed_iteration.txt (and from the dataloader's
    start without a readable data.pt); the adapter's entry point checks the folder first: one message."""
    import ray
    from adapter_verl.main import main

    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    checkpoints = tmp_path / "ckpt"
    (checkpoints / "global_step_3").mkdir(parents=True)  # saved, but the latest-step file is gone
    with pytest.raises(SystemExit) as info:
        main([*STOCK_QWEN2_7B, f"trainer.default_local_dir={checkpoints}"])
    err = capsys.readouterr().err
    assert info.value.code == 1 and not ray.is_initialized() and "Traceback" not in err
    latest = checkpoints / "latest_checkpointed_iteration.txt"
    assert (
        f"adapter_verl: cannot resume: {latest}: missing, but {checkpoints} holds checkpoints of steps 3"
        in err
    )
    assert "silently start again at step 1" in err

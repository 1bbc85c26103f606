"""SkyRL 0.4.0's fully asynchronous trainer (`FullyAsyncRayPPOTrainer`, `trainer.fully_async.enabled`)
through the adapter: SkyRL's stock fully async launchers at dry run, its staleness field on the core's
`async.max_staleness`, its `rollout_is` loss on the server (bit-identical to SkyRL's), its off-policy
correction on the wire, colocation refused with the reason, the core's staleness gate (a group
older than k is never trained: dropped or regenerated), and real runs in process (~1 s each)."""

from __future__ import annotations

import asyncio
import io
import json
import math
from pathlib import Path

import pytest
import torch
from skyrl_e2e_run import IN_PROCESS, TINY_FULLY_ASYNC, TINY_GRPO, RecordingGenerator, logged_steps, run_grpo

ASYNC_BASE = TINY_FULLY_ASYNC


def _dry(args: list[str], config_cls=None) -> tuple[int, str, str]:
    from adapter_skyrl.main import dry_run

    out, err = io.StringIO(), io.StringIO()
    return dry_run(args, out=out, err=err, config_cls=config_cls), out.getvalue(), err.getvalue()


def _recorded(name: str, home: Path) -> list[str]:
    """SkyRL's launcher `examples/train/<name>` at the recorded default branch (launchers/README.md)."""
    from skyrl_launcher_data import launcher_overrides

    return launcher_overrides(f"head/examples/train/{name}", home)


def _translate(args: list[str]):
    from adapter_skyrl.config import parse_cli, translate

    return translate(parse_cli(args), steps_per_epoch=None)


# -- SkyRL's stock launchers and the field mapping ---------------------------------------------


def test_stock_fully_async_gsm8k_launcher_passes_dry_run_with_its_staleness_on_the_core(tmp_path):
    args = [*_recorded("fully_async/fully_async_run_gsm8k.sh", tmp_path), "trainer.logger=console"]
    code, out, err = _dry(args)
    assert code == 0, err
    arctic = _translate(args).arctic
    assert arctic.async_settings.max_staleness == 4  # trainer.fully_async.max_staleness_steps=4
    assert arctic.async_settings.stale_policy == "drop"
    assert arctic.loss.policy_loss == "rollout_is" and arctic.loss.loss_fn == "arctic_rl_core"
    assert not arctic.placement.colocate
    assert "async:\n    max_staleness: 4" in out
    assert (
        "generation                   asynchronous: overlaps training; rollouts at most 4 optimizer step(s) old (older: drop)"
        in out
    )


DAPO_LAUNCHER = "algorithms/dapo/run_dapo_qwen3_1.7b_aime_fully_async.sh"


def _dapo_args(home: Path, launcher: str = DAPO_LAUNCHER, rows: int = 320) -> list[str]:
    """A DAPO launcher's arguments with its training file in place (`rows` rows: an LR warm-up needs
    the run's length; 320 give the fully async launcher 200 steps for its 160 warm-up steps)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    args = _recorded(launcher, home)
    (train,) = (a.split("=", 1)[1].strip("[]'") for a in args if a.startswith("data.train_data="))
    Path(train).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": ["q"] * rows}), train)
    return args


def test_stock_dapo_fully_async_launcher_on_the_adapters_dapo_entry_point(tmp_path, monkeypatch):
    """SkyRL's DAPO example runs its own config class (DAPOConfig: overlong_buffer_len and
    overlong_buffer_penalty_factor) and trainer subclass (the soft overlong punishment).
    `adapter_skyrl.main` refuses the two fields naming `adapter_skyrl.dapo`, the adapter's counterpart;
    there the launcher passes as it is, with every DAPO setting on the core or said aloud (its
    token_mean_legacy summed on the server over SkyRL's own advantage scaling, its HF export schedule
    served, its warmup in steps)."""
    from adapter_skyrl.dapo import ArcticDAPOConfig

    monkeypatch.setenv(
        "WANDB_API_KEY", "unused"
    )  # the launcher logs to wandb; SkyRL's validate_cfg wants a key
    args = _dapo_args(tmp_path)
    code, _, err = _dry(args)
    assert code == 2
    assert (
        "trainer.algorithm.overlong_buffer_len, trainer.algorithm.overlong_buffer_penalty_factor" in err
        and "python -m adapter_skyrl.dapo" in err
    )

    code, out, err = _dry(args, config_cls=ArcticDAPOConfig)
    assert code == 0, err
    assert "DAPO soft overlong punishment: rewards fall linearly over the last 4096 of 8192" in out
    assert "DAPO overlong filtering" in out and "HF weights every 80 steps (trainer.hf_save_interval)" in out
    from adapter_skyrl.config import translate
    from adapter_skyrl.dapo import parse_cli

    cfg = parse_cli(args)
    assert (
        cfg.trainer.algorithm.overlong_buffer_len,
        cfg.trainer.algorithm.overlong_buffer_penalty_factor,
    ) == (4096, 1.0)
    arctic = translate(cfg, steps_per_epoch=10).arctic
    assert arctic.async_settings.max_staleness == 8 and not arctic.placement.colocate
    loss = arctic.loss
    assert (loss.policy_loss, loss.clip_ratio_low, loss.clip_ratio_high, loss.clip_ratio_c) == (
        "rollout_is",
        0.5,
        4.0,
        10.0,
    )
    assert (loss.loss_agg_mode, loss.pg_loss_agg_mode) == ("token-mean", "token-sum")  # token_mean_legacy
    assert arctic.optimizer.warmup_steps == 160
    # DAPOConfig's defaults when the launcher leaves the buffer unset
    bare = parse_cli([a for a in args if "overlong_buffer" not in a])
    assert (
        bare.trainer.algorithm.overlong_buffer_len,
        bare.trainer.algorithm.overlong_buffer_penalty_factor,
    ) == (512, 1.0)


@pytest.mark.parametrize(
    "launcher", ["algorithms/dapo/run_dapo_qwen3_1.7b_aime.sh", "algorithms/dapo/run_dapo_gsm8k.sh"]
)
def test_stock_synchronous_dapo_launchers_on_the_dapo_entry_point(launcher, tmp_path, monkeypatch):
    """SkyRL's synchronous DAPO examples (main_dapo, colocated) pass as they are."""
    from adapter_skyrl.dapo import ArcticDAPOConfig

    monkeypatch.setenv("WANDB_API_KEY", "unused")
    args = _dapo_args(tmp_path, launcher, rows=10240)
    code, out, err = _dry(args, config_cls=ArcticDAPOConfig)
    assert code == 0, err
    assert "DAPO soft overlong punishment" in out and "DAPO overlong filtering" in out
    if "trainer.algorithm.dynamic_sampling.type=filter" in args:
        assert "dynamic sampling (filter, SkyRL's trainer)" in out and "at most 30 generate calls" in out


def test_staleness_counts_optimizer_steps_and_the_tis_cap_is_the_core_cap():
    arctic = _translate(
        [*ASYNC_BASE, "trainer.update_epochs_per_batch=2", "trainer.fully_async.max_staleness_steps=3",
         "trainer.fully_async.num_parallel_generation_workers=4",
         "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=1.5", *IN_PROCESS]
    ).arctic  # fmt: skip
    assert arctic.async_settings.max_staleness == 6  # 3 SkyRL steps x 2 optimizer steps each
    assert arctic.async_settings.is_weight_cap == 1.5
    sync = _translate([*TINY_GRPO, *IN_PROCESS]).arctic
    assert sync.async_settings.max_staleness == 0  # not fully async: the synchronous path


def test_colocated_fully_async_is_refused_at_dry_run_with_the_reason():
    code, _, err = _dry([*ASYNC_BASE, *IN_PROCESS, "trainer.placement.colocate_all=true"])
    assert code == 2
    assert "trainer.placement.colocate_all = true" in err
    assert "take turns" in err and "set trainer.placement.colocate_all=false" in err


def test_what_skyrls_async_trainer_asserts_is_reported_at_dry_run():
    code, _, err = _dry(
        [*ASYNC_BASE, *IN_PROCESS, "trainer.algorithm.policy_loss_type=regular", "trainer.train_batch_size=2",
         "trainer.fully_async.num_parallel_generation_workers=5"]
    )  # fmt: skip
    assert code == 2
    assert 'trainer.algorithm.policy_loss_type = "regular"' in err and "rollout_is" in err
    assert "trainer.train_batch_size = 2" in err
    assert "trainer.fully_async.num_parallel_generation_workers = 5" in err


def test_dynamic_sampling_is_refused_naming_the_async_equivalent():
    code, _, err = _dry([*ASYNC_BASE, *IN_PROCESS, "trainer.algorithm.dynamic_sampling.type=filter"])
    assert code == 2 and 'trainer.algorithm.dynamic_sampling.type = "filter"' in err
    assert "SkyRL's fully async trainer refuses dynamic sampling" in err
    assert "trainer.fully_async.sample_full_batch=true" in err and "trainer.fully_async.enabled=false" in err


def test_cispo_anchored_on_the_rollout_takes_no_tis_on_top():
    code, _, err = _dry(
        [*ASYNC_BASE, *IN_PROCESS, "trainer.algorithm.policy_loss_type=cispo",
         "trainer.algorithm.cispo.cispo_anchor=rollout"]
    )  # fmt: skip
    assert code == 2 and "count it twice" in err
    code, _, err = _dry(
        [*ASYNC_BASE, *IN_PROCESS, "trainer.algorithm.policy_loss_type=cispo",
         "trainer.algorithm.cispo.cispo_anchor=rollout", "trainer.algorithm.off_policy_correction.tis_ratio_type=null"]
    )  # fmt: skip
    assert code == 0, err


# -- the loss and the off-policy correction ------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [(0.2, 0.2), (0.5, 4.0), (0.1, 0.3)])
def test_rollout_is_family_is_bit_identical_to_skyrls_rollout_is(clip, seed):
    """The core `rollout_is` family with the rollout log-probs as old log-probs (what the adapter
    sends) against SkyRL's own `rollout_is_policy_loss`: per-token loss sums and every token's
    gradient, rtol = 0."""
    from arctic_rl_losses.aggregation import aggregate
    from arctic_rl_losses.families import FamilyParams, policy_terms
    from arctic_rl_testbed.parity.loss_cases import random_policy_loss_case
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
    from skyrl.train.config.config import AlgorithmConfig

    case = random_policy_loss_case(seed)
    low, high = clip
    rollout = case.old_logprobs_B_R  # the behaviour policy's log-probs
    mask = case.mask_B_R.bool()
    ours_lp = case.logprobs_B_R.clone().requires_grad_(True)
    terms = policy_terms(
        "rollout_is", ours_lp, rollout, case.advantages_B_R, mask,
        FamilyParams(clip_ratio_low=low, clip_ratio_high=high),
    )  # fmt: skip
    ours = aggregate(terms.pg_losses, mask, "token-sum", dp_size=1)
    ours.backward()
    theirs_lp = case.logprobs_B_R.clone().requires_grad_(True)
    config = AlgorithmConfig(
        policy_loss_type="rollout_is", eps_clip_low=low, eps_clip_high=high, loss_reduction="sequence_mean"
    )
    theirs, metrics = PolicyLossRegistry.get("rollout_is")(
        theirs_lp, torch.zeros_like(rollout), case.advantages_B_R, config=config, loss_mask=case.mask_B_R,
        rollout_logprobs=rollout,
    )  # fmt: skip
    theirs.backward()
    # SkyRL's reduce_loss is the masked sum (its reduction lives in the advantages)
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=0)
    assert terms.clipped[mask].any() or clip == (0.5, 4.0)  # the zeroing branch is exercised
    assert metrics["clip_ratio"] == pytest.approx(float((terms.clipped & mask).sum() / mask.sum()))


@pytest.fixture
def dispatch_and_batch():
    from adapter_skyrl.config import parse_cli, to_arctic_config
    from adapter_skyrl.dispatch import ArcticWorkerDispatch
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.dispatch import run
    from arctic_rl_core.weight_sync import WeightSyncPolicy
    from arctic_rl_core.wire import PayloadSpec
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

    cfg = parse_cli([*ASYNC_BASE, *IN_PROCESS, "trainer.policy_mini_batch_size=2", "trainer.train_batch_size=2",
                     "trainer.fully_async.num_parallel_generation_workers=2",
                     "trainer.algorithm.off_policy_correction.sequence_mask_metric=geometric"])  # fmt: skip
    arctic = to_arctic_config(cfg, steps_per_epoch=2)
    backend = create_backend(arctic)
    spec = PayloadSpec.from_config(arctic, pad_token_id=backend.pad_token_id)
    dispatch = ArcticWorkerDispatch(cfg, backend, spec, WeightSyncPolicy.from_config(arctic))
    sent = []
    original = backend.forward_backward

    async def spy(payload):
        sent.append(payload)
        return await original(payload)

    backend.forward_backward = spy
    prompts = [backend.tokenizer.encode(t) for t in ("count the schools", "list movies", "how many", "bikes")]
    out = run(backend.generate(prompts, SamplingParams(max_tokens=6, temperature=1.0, logprobs=True)))
    responses = [list(c.token_ids) for c in out.completions]
    seqs, attn, resp_mask, _r, loss_mask, rollout_lp, _e, _s = convert_prompts_responses_to_batch_tensors(
        backend.pad_token_id, prompts, responses, [[0.0] * len(r) for r in responses],
        [[1] * len(r) for r in responses], [list(c.logprobs) for c in out.completions],
    )  # fmt: skip
    data = TrainingInputBatch(
        {"sequences": seqs, "attention_mask": attn, "response_mask": resp_mask, "loss_mask": loss_mask,
         "rollout_logprobs": rollout_lp}
    )  # fmt: skip
    data.metadata = {"response_length": resp_mask.shape[1]}
    return dispatch, data, sent


def test_rollout_is_sends_the_rollout_logprobs_as_old_and_skyrls_masks_on_the_loss_mask(dispatch_and_batch):
    """With `rollout_is` the server's old log-probs are the sampler's (SkyRL's loss reads them), and
    SkyRL's geometric sequence mask (pi_old vs pi_rollout outside [0.99, 1.01]) zeroes whole rows of
    the loss mask on the wire; TIS weights come with it."""
    dispatch, data, sent = dispatch_and_batch
    policy = dispatch.forward("policy", data).loss_fn_outputs
    old = torch.tensor([row["logprobs"] for row in policy])
    shifted = old.clone()
    shifted[:2] -= 0.5 * (data["loss_mask"][:2] > 0)  # rows 0, 1: geometric ratio e^0.5, masked out
    shifted[2:] += 0.005 * (data["loss_mask"][2:] > 0)  # rows 2, 3: e^0.005, inside [0.99, 1.01]
    data["action_log_probs"] = shifted
    data["advantages"] = torch.where(data["loss_mask"] > 0, torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]), 0.0)
    out = dispatch.forward_backward("policy", data)
    assert math.isfinite(out.metrics["policy_loss"])
    payload = sent[-1]
    wire_mask = torch.as_tensor(payload.batch["response_mask"]).bool()
    resp_len = data["response_mask"].sum(-1)
    assert wire_mask[:2].sum() == 0 and wire_mask[2:].sum(-1).tolist() == resp_len[2:].tolist()
    # the old log-probs on the wire are the rollout log-probs, not the trainer's forward
    old_B_S = torch.as_tensor(payload.batch["old_log_probs"])  # response values at response positions
    for row in (2, 3):
        n = int(resp_len[row])
        expected = data["rollout_logprobs"][row, -n:]
        torch.testing.assert_close(old_B_S[row][wire_mask[row]].float(), expected.float(), rtol=0, atol=1e-6)
        assert not torch.allclose(expected, shifted[row, -n:], rtol=0, atol=1e-3)  # not the forward's
    assert "rollout_is_weights" in payload.batch
    metrics = dispatch.pop_metrics()
    assert metrics["off_policy/geo_sequence_mask_masked_ratio"] == pytest.approx(0.5)


# -- the run, in process -------------------------------------------------------------------------


def _async_run(data: Path, root: Path, *extra: str, generator_cls=None):
    import skyrl_e2e_run

    original = skyrl_e2e_run.RecordingGenerator
    if generator_cls is not None:
        skyrl_e2e_run.RecordingGenerator = generator_cls
    try:
        return run_grpo(
            [f"data.train_data=['{data}']", f"trainer.ckpt_path={root / 'ckpt'}",
             f"trainer.export_path={root / 'export'}", *extra],
            base=(*ASYNC_BASE, *IN_PROCESS),
        )  # fmt: skip
    finally:
        skyrl_e2e_run.RecordingGenerator = original


def test_fully_async_run_overlaps_generation_and_trains_within_the_bound(learnable_jsonl, tmp_path):
    exp = _async_run(learnable_jsonl, tmp_path, "trainer.max_training_steps=3")
    from adapter_skyrl.fully_async import ArcticFullyAsyncPPOTrainer

    assert type(exp.trainer) is ArcticFullyAsyncPPOTrainer
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2, 3]
    for step in steps.values():
        assert math.isfinite(step["policy/policy_loss"])
        assert step["async/weights_staleness_max"] <= 1 and step["async/trained_groups"] == 1
        # SkyRL's token TIS weights (cap 2.0), their statistics in the core's names
        assert (
            0
            < step["async/is_weight_min"]
            <= step["async/is_weight_mean"]
            <= step["async/is_weight_max"]
            <= 2.0
        )
        if step["async/weights_staleness_max"] == 1:  # sampled one version back: pi_old != pi_rollout
            assert step["async/is_weight_min"] < step["async/is_weight_max"]
    # the second group was generated while the first trained: trained one step behind
    assert max(s["async/weights_staleness_max"] for s in steps.values()) == 1
    for step, trainer_version, versions in exp.trainer.trained_versions:
        assert trainer_version == step - 1 and all(0 <= trainer_version - v <= 1 for v in versions)
    assert [s["arctic/weights_version"] for _, s in sorted(steps.items())] == [1, 2, 3]


class SlowFirstGroup(RecordingGenerator):
    """The first prompt group is sampled at once (weights version 0) but reaches the trainer only
    after it has taken 2 optimizer steps: at least 2 versions old, over the bound of 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.uids: list[str] = []

    async def generate(self, input_batch):
        from adapter_skyrl.loop_bridge import on_backend_loop

        uid = input_batch["trajectory_ids"][0].instance_id
        first = not self.uids
        self.uids.append(uid)
        out = await super().generate(input_batch)
        if first:
            for _ in range(600):
                if (await on_backend_loop(self.backend.state())).trainer_version >= 2:
                    break
                await asyncio.sleep(0.05)
        return out


@pytest.mark.parametrize("policy", ["drop", "regenerate"])
def test_a_group_older_than_the_bound_is_never_trained(policy, learnable_jsonl, tmp_path):
    exp = _async_run(
        learnable_jsonl, tmp_path, "trainer.max_training_steps=6",
        f"trainer.arctic_rl.async.stale_policy={policy}", generator_cls=SlowFirstGroup,
    )  # fmt: skip
    steps = logged_steps(exp)
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    for step, trainer_version, versions in exp.trainer.trained_versions:
        assert all(0 <= trainer_version - v <= 1 for v in versions), (step, trainer_version, versions)
    dropped = sum(s["async/dropped_groups"] for s in steps.values())
    regenerated = sum(s["async/regenerated_groups"] for s in steps.values())
    assert (dropped, regenerated) == ((1, 0) if policy == "drop" else (0, 1))
    assert all(s["async/staleness_violation_count"] == 0 for s in steps.values())
    slow = exp.generator.uids[0]
    # regenerate: the slow group's prompt was generated a second time (and trained); drop: never again
    assert exp.generator.uids.count(slow) == (2 if policy == "regenerate" else 1)


# -- arctic-rl demo --framework skyrl --async 1 ----------------------------------------------------


def test_demo_async_1_runs_skyrls_fully_async_trainer(tmp_path):
    """`--async 1` is parsed, the SkyRL driver declares its asynchronous mode, and the GRPO phase runs
    SkyRL's fully async trainer (2 tiny steps in process) with the core's per-step statistics."""
    import yaml
    from arctic_rl_testbed.demo import run as demo_run
    from arctic_rl_testbed.demo.drivers import load_driver, supports_async
    from arctic_rl_testbed.demo.run_log import MetricsLog
    from demo_checks import _parsed, tiny_options

    run_dir = tmp_path / "run"
    args = _parsed(["--framework", "skyrl", "--out", str(run_dir), "--async", "1"])
    assert demo_run.resolve_options(args).max_staleness == 1
    assert supports_async(load_driver("skyrl"))
    assert demo_run.run_demo(tiny_options("skyrl", run_dir, max_staleness=1, eval_samples=0)) == 0
    steps = MetricsLog(run_dir).grpo_steps()
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert step["async/max_staleness"] == 1 and step["async/trained_groups"] == 2
        assert 0 <= step["async/weights_staleness_max"] <= 1 and math.isfinite(step["loss"])
        # one meaning for both versions (optimizer steps in the weights): the sampler's after the step's
        # sync, and the oldest any trained rollout was sampled with (the trainer's version at the step,
        # step - 1, less the largest staleness), never the sum over the step's prompt groups
        trainer_version = step["step"] - 1
        assert step["rollout_weights_version"] == trainer_version - step["async/weights_staleness_max"]
        assert step["rollout_ex"] is not None
    assert [s["weights_version"] for s in steps] == [1, 2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["weights_version"] == [1, 2] and summary["max_staleness"] == 1
    assert summary["rollout_weights_version"] == [s["rollout_weights_version"] for s in steps]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["arctic_rl"]["async"]["max_staleness"] == 1
    overrides = config["skyrl_overrides"]
    assert (
        "trainer.fully_async.enabled=true" in overrides
        and "trainer.fully_async.max_staleness_steps=1" in overrides
    )
    # rollout_is alone, as SkyRL's fully async examples run it: a TIS on top would weight each token
    # by its ratio to the rollout policy twice (bench learning, README)
    assert "trainer.algorithm.policy_loss_type=rollout_is" in overrides
    assert not any("off_policy_correction" in o for o in overrides)


def test_fully_async_checkpoint_resumes_with_skyrls_async_state(learnable_jsonl, tmp_path):
    """SkyRL's fully async checkpoint (the backend's, plus its consumed-UID state) resumes: the
    resumed run trains step 3 at trainer version 2, on prompts the first run had not trained."""
    first = _async_run(
        learnable_jsonl, tmp_path / "a", "trainer.max_training_steps=2", "trainer.ckpt_interval=1"
    )
    ckpt = tmp_path / "a" / "ckpt" / "global_step_2"
    assert (ckpt / "fully_async_state.pt").is_file()
    resumed = _async_run(
        learnable_jsonl, tmp_path / "b", "trainer.max_training_steps=3", "trainer.resume_mode=from_path",
        f"trainer.resume_path={ckpt}",
    )  # fmt: skip
    assert sorted(logged_steps(resumed)) == [3]
    ((step, trainer_version, versions),) = resumed.trainer.trained_versions
    assert (step, trainer_version) == (3, 2) and all(0 <= 2 - v <= 1 for v in versions)
    state = torch.load(ckpt / "fully_async_state.pt", weights_only=False)
    assert set(state["consumed_uids"]) == {u for uids in first.trainer.trained_uids for u in uids}
    assert not set(resumed.trainer.trained_uids[0]) & set(state["consumed_uids"])


# -- SkyRL's DAPO example settings on the fully async trainer (adapter_skyrl.dapo) ------------------


def test_dapo_fully_async_trains_two_steps_with_dapos_reward_and_mask_shaping(learnable_jsonl, tmp_path):
    """`python -m adapter_skyrl.dapo`'s experiment with the DAPO example's settings (soft overlong
    punishment, overlong filtering, clip-higher 0.5/4.0, clip_ratio_c, rollout_is, token TIS) on SkyRL's
    fully async trainer, 2 steps in process: every trained reward is the raw reward less the DAPO
    penalty of its length, every truncated response reaches the server with an all-zero mask, and
    every trained group is within the staleness bound."""
    from adapter_skyrl.dapo import ArcticDAPOExp, parse_cli
    from arctic_rl_core.backends.forwarding import ForwardingBackend
    from arctic_rl_core.backends.registry import create_backend
    from skyrl_e2e_run import RecordingExp

    sent = []

    class Spy(ForwardingBackend):
        async def forward_backward(self, payload):
            sent.append(payload)
            return await self.target.forward_backward(payload)

    seen: list[tuple] = []

    class Exp(RecordingExp, ArcticDAPOExp):
        def trainer_class(self):
            class Capturing(super().trainer_class()):
                def postprocess_generator_output(self, out, uids, **kwargs):
                    raw = (
                        list(out["rewards"]),
                        [len(r) for r in out["response_ids"]],
                        list(out["stop_reasons"]),
                    )
                    result = super().postprocess_generator_output(out, uids, **kwargs)
                    seen.append((*raw, [sum(r) for r in result[0]["rewards"]], result[0]["loss_masks"]))
                    return result

            return Capturing

    dapo = [
        "trainer.algorithm.overlong_buffer_len=2", "trainer.algorithm.overlong_buffer_penalty_factor=0.5",
        "generator.apply_overlong_filtering=true", "generator.sampling_params.stop=['e']",
        "trainer.algorithm.eps_clip_low=0.5", "trainer.algorithm.eps_clip_high=4.0", "trainer.algorithm.clip_ratio_c=10.0",
        "trainer.max_training_steps=2", "generator.n_samples_per_prompt=8",
        "generator.sampling_params.max_generate_length=4",
        f"data.train_data=['{learnable_jsonl}']", f"trainer.ckpt_path={tmp_path / 'ckpt'}",
        f"trainer.export_path={tmp_path / 'export'}",
    ]  # fmt: skip
    exp = Exp(
        parse_cli([*ASYNC_BASE, *IN_PROCESS, *dapo]), backend_factory=lambda cfg: Spy(create_backend(cfg))
    )
    asyncio.run(exp._setup_trainer().train())

    assert type(exp.trainer).__mro__[1].__name__ == "ArcticFullyAsyncDAPOTrainer"
    assert sorted(logged_steps(exp)) == [1, 2] and len(seen) == 2
    truncated = 0
    for rewards, lengths, stops, trained, masks in seen:
        for reward, length, stop, shaped, mask in zip(rewards, lengths, stops, trained, masks, strict=True):
            penalty = 0.5 * max(0, length - (4 - 2)) / 2  # budget 4 tokens, buffer 2, factor 0.5
            # SkyRL's per-token rewards; over the budget (4 sampled + the EOS SkyRL appends after a stop
            # string): 0, as SkyRL's DAPO trainer sets it
            expected = 0.0 if length > 4 else sum(reward) - penalty
            assert shaped == pytest.approx(expected, abs=1e-12)
            if stop == "length":
                assert set(mask) == {0}
            else:  # stopped: trained, but for the EOS SkyRL appends after a stop string (as on vLLM)
                assert mask in ([1] * len(mask), [1] * (len(mask) - 1) + [0])
            truncated += stop == "length"
    assert any(length > 2 for _, lengths, *_ in seen for length in lengths)  # some reward was punished
    assert 0 < truncated < sum(len(s[0]) for s in seen)  # some responses truncated, some stopped
    zero_rows = sum(int((torch.as_tensor(p.batch["response_mask"]).sum(-1) == 0).sum()) for p in sent)
    assert zero_rows == truncated  # the server trained no token of a truncated response
    for step, trainer_version, versions in exp.trainer.trained_versions:
        assert trainer_version == step - 1 and all(0 <= trainer_version - v <= 1 for v in versions)

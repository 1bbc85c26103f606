"""verl's separate-async mode at dry run (no Ray): verl's own staleness fields map onto the core's
`async` group, and everything verl's separate-async trainer would assert after Ray is up, or the
Arctic path cannot run (the hybrid engine, i.e. colocated; more than one update per sync without verl's
bypass mode), is a problem naming the field, the value and the fix."""

from __future__ import annotations

import pytest

# a GRPO run of verl's stock examples' shape (examples/grpo_trainer), on 8 training GPUs
BASE = [
    "algorithm.adv_estimator=grpo",
    "data.max_prompt_length=512",
    "data.max_response_length=1024",
    "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=5",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
]
# in verl's separate-async mode, as verl's own launchers set it
SEPARATE_ASYNC = [
    *BASE,
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "trainer.v1.trainer_mode=separate_async",
    "actor_rollout_ref.hybrid_engine=false",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=8",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "trainer.v1.sampler.max_off_policy_threshold=3",
]


def checked(*overrides: str, base=SEPARATE_ASYNC):
    from adapter_verl.main import check

    return check([*base, *overrides])


def _replace(base: list[str], key: str, value: str) -> list[str]:
    return [o for o in base if not o.startswith(key + "=")] + [f"{key}={value}"]


def test_verls_staleness_fields_drive_the_core_async_group():
    result = checked()
    assert result.problems == []
    assert any("now arctic_separate_async" in n for n in result.notices)
    cfg = result.resolution.config
    # a trajectory may span 3 steps from its prompt's submission: at most 2 steps (x 1 epoch) stale
    assert cfg.async_settings.max_staleness == 2
    assert cfg.async_settings.stale_policy == "drop"
    assert cfg.async_settings.is_weight_cap == 2.0  # the core's truncated IS (verl's rollout_is is null)
    assert (cfg.placement.colocate, cfg.placement.training_gpus, cfg.placement.sampling_gpus) == (False, 8, 8)


def test_staleness_is_counted_in_optimizer_steps():
    cfg = checked("actor_rollout_ref.actor.ppo_epochs=2").resolution.config
    assert cfg.async_settings.max_staleness == 4  # 2 verl steps x 2 optimizer steps each


def test_verls_token_tis_cap_is_the_core_cap_and_wait_is_dropless():
    result = checked(
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=1.5",
        "trainer.v1.sampler.max_off_policy_strategy=wait",
    )
    assert result.problems == []
    cfg = result.resolution.config
    assert cfg.async_settings.is_weight_cap == 1.5
    assert cfg.async_settings.stale_policy == "drop"  # the core default: verl's wait never lets one go stale
    assert "stale_policy" not in cfg.model_dump(exclude_unset=True)["async"]
    (wait,) = [n for n in result.notices if "max_off_policy_strategy=wait" in n]
    assert "no trained rollout exceeds the bound" in wait and "async.stale_policy is never applied" in wait
    assert not [
        n for n in checked().notices if "max_off_policy_strategy" in n
    ]  # drop: the core's drop, no notice


def test_every_separate_async_and_sampler_field_has_its_own_row():
    """Each leaf of verl 0.9.1's separate_async and replay-buffer config is mapped, refused or passed
    through by an entry of its own (with its reason), not by its group's catch-all row."""
    from adapter_verl.field_table import VERL_FIELDS
    from omegaconf import OmegaConf

    config = checked().config
    groups = {
        "trainer.v1.separate_async": config.trainer.v1.separate_async,
        "trainer.v1.sampler": config.trainer.v1.sampler,
    }
    catch_all = {"trainer.v1.sampler", "trainer.v1.separate_async"}
    leaves = []
    for prefix, node in groups.items():
        for key in OmegaConf.to_container(node, resolve=True):
            leaves.append(f"{prefix}.{key}")
    assert len(leaves) >= 8
    for leaf in leaves:
        (row, *_) = VERL_FIELDS.rows_for(leaf)
        names = set(row.fields)
        assert not names <= catch_all, leaf
        assert leaf in names or any(leaf.startswith(f"{n}.") or n == leaf for n in names if n), leaf


def test_threshold_one_is_the_synchronous_bound():
    cfg = checked("trainer.v1.sampler.max_off_policy_threshold=1").resolution.config
    assert cfg.async_settings.max_staleness == 0


def test_the_synchronous_mode_sets_nothing_async():
    from adapter_verl.config import translate_fields
    from adapter_verl.main import compose, with_arctic_defaults

    translation = translate_fields(compose(with_arctic_defaults(BASE)[0]))
    assert not [key for key in translation.values if key.startswith("async.")]


@pytest.mark.parametrize(
    ("override", "field", "says"),
    [
        ("actor_rollout_ref.hybrid_engine=true", "actor_rollout_ref.hybrid_engine=True", "colocated"),
        (
            "trainer.v1.separate_async.parameter_sync_step=2",
            "trainer.v1.separate_async.parameter_sync_step=2",
            "set algorithm.rollout_correction.bypass_mode=true",
        ),
        (
            "trainer.v1.separate_async.parameter_sync_step=0",
            "trainer.v1.separate_async.parameter_sync_step",
            "integer >= 1",
        ),
        (
            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
            "checkpoint_engine.backend='naive'",
            "set it to nccl",
        ),
        ("trainer.v1.sampler.max_off_policy_threshold=null", "max_off_policy_threshold", "unbounded"),
        ("actor_rollout_ref.rollout.calculate_log_probs=false", "calculate_log_probs=False", "truncated IS"),
        (
            "++remote_backend.core.async.max_staleness=5",
            "remote_backend.core.async.max_staleness",
            "verl owns it",
        ),
    ],
)
def test_what_the_arctic_async_path_cannot_run_is_a_problem_with_its_fix(override, field, says):
    key, _, value = override.lstrip("+").partition("=")
    base = SEPARATE_ASYNC if override.startswith("++") else _replace(SEPARATE_ASYNC, key, value)
    result = checked(*([override] if override.startswith("++") else []), base=base)
    matching = [p for p in result.problems if field in p]
    assert matching, result.problems
    assert says in matching[0]


def test_the_hybrid_engine_default_is_rejected_with_the_reason():
    base = [o for o in SEPARATE_ASYNC if not o.startswith("actor_rollout_ref.hybrid_engine")]
    problems = checked(base=base).problems
    assert any(
        p.startswith("actor_rollout_ref.hybrid_engine=True") and "cannot overlap" in p for p in problems
    )


@pytest.mark.parametrize("mode", ["colocate_async", "sync"])
def test_other_verl_modes_are_rejected(mode):
    problems = checked(base=[*BASE, f"trainer.v1.trainer_mode={mode}"]).problems
    assert any(p.startswith(f'trainer.v1.trainer_mode = "{mode}"') for p in problems), problems


def test_verls_own_separate_async_class_is_never_reached_from_a_composed_config():
    from adapter_verl.config import resolve
    from adapter_verl.main import compose, prepare

    prepared = prepare(SEPARATE_ASYNC)
    overrides = _replace(prepared.overrides, "trainer.v1.trainer_mode", "separate_async")
    problems = resolve(compose(overrides), None).problems
    assert any("verl's own separate_async trainer runs verl's GPU workers" in p for p in problems)


def test_dry_run_prints_the_async_group(capsys):
    from adapter_verl.main import main

    with pytest.raises(SystemExit) as info:
        main(["--dry-run", *SEPARATE_ASYNC])
    out = capsys.readouterr()
    assert info.value.code == 0, out.err
    assert "max_staleness: 2" in out.out


# -- verl's default parameter_sync_step (4): several updates per weight sync, in bypass mode ---------------

# verl's separate-async launch line as above, with verl's own default of 4 updates per sync (no
# parameter_sync_step override) and the batch verl asserts for it: 4 mini-batches of 64 prompts
STOCK_SYNC_STEP = [
    *[
        o
        for o in SEPARATE_ASYNC
        if "parameter_sync_step" not in o and not o.startswith("data.train_batch_size")
    ],
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
]
BYPASS = "algorithm.rollout_correction.bypass_mode=true"


def test_verls_default_of_four_updates_per_sync_names_bypass_mode_as_the_fix():
    result = checked(base=STOCK_SYNC_STEP)
    assert result.config.trainer.v1.separate_async.parameter_sync_step == 4  # verl 0.9.1's default
    assert result.config.algorithm.rollout_correction.bypass_mode is False
    (problem,) = result.problems
    assert problem.startswith("trainer.v1.separate_async.parameter_sync_step=4")
    assert "pi_old" in problem and "set algorithm.rollout_correction.bypass_mode=true" in problem
    from adapter_verl.config import settings_from_verl

    assert settings_from_verl(checked().config, 10).old_logprobs_from_rollout is False


@pytest.mark.parametrize(
    ("overrides", "k"),
    [
        ((), 11),  # threshold 3 x 4 updates per sync - 1
        (("actor_rollout_ref.actor.ppo_epochs=2",), 22),  # x 2 optimizer steps per update
        (("trainer.v1.sampler.max_off_policy_threshold=1",), 3),  # no step stale: the 4 updates of one sync
    ],
)
def test_bypass_mode_serves_several_updates_per_sync_with_its_staleness_bound(overrides, k):
    from adapter_verl.config import settings_from_verl
    from arctic_rl_core.config.shape import TrainingShape

    result = checked(BYPASS, *overrides, base=STOCK_SYNC_STEP)
    assert result.problems == []
    cfg = result.resolution.config
    assert cfg.async_settings.max_staleness == k
    shape = TrainingShape.from_config(cfg)
    # one verl step: 4 mini-batches of 64 prompts x 5 rollouts, one update each (x ppo_epochs)
    assert (shape.mini_batches_per_step, shape.train_batch_size) == (4, 64 * 5)
    epochs = 2 if overrides and "ppo_epochs" in overrides[0] else 1
    assert shape.optimizer_steps_per_step == 4 * epochs
    # what the worker reads: the old log-probs are the rollout's, so it sends no IS weights
    assert settings_from_verl(result.config, 10).old_logprobs_from_rollout is True


@pytest.mark.parametrize(
    ("override", "field", "says"),
    [
        (
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is='token'",
            "computes no rollout correction in bypass mode",
        ),
        (
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs='token_k1'",
            "set it to null, or algorithm.rollout_correction.bypass_mode=false",
        ),
        (
            "++remote_backend.core.async.is_weight_cap=3.0",
            "remote_backend.core.async.is_weight_cap=3.0",
            "sends no IS weights",
        ),
        (
            "actor_rollout_ref.rollout.calculate_log_probs=false",
            "calculate_log_probs=False",
            "takes the old log-probs from the rollout",
        ),
    ],
)
def test_what_bypass_mode_would_leave_unused_is_a_problem_with_its_fix(override, field, says):
    result = checked(BYPASS, override, base=STOCK_SYNC_STEP)
    matching = [p for p in result.problems if field in p]
    assert len(matching) == 1, result.problems
    assert says in matching[0]


def test_bypass_mode_in_the_synchronous_mode_takes_the_old_log_probs_from_the_rollout():
    """verl's V1 trainer copies rollout_log_probs into old_log_probs in bypass mode, in its synchronous mode
    too (verl/trainer/ppo/v1/trainer_base.py): the worker sends them as it sends any old log-probs, and the
    rollout must compute them."""
    served = checked(BYPASS, "actor_rollout_ref.rollout.calculate_log_probs=true", base=BASE)
    assert served.problems == [], served.problems
    from adapter_verl.config import settings_from_verl

    assert settings_from_verl(served.config, None).old_logprobs_from_rollout is True
    (problem,) = checked(BYPASS, "actor_rollout_ref.rollout.calculate_log_probs=false", base=BASE).problems
    assert problem.startswith("actor_rollout_ref.rollout.calculate_log_probs=False: ")
    assert (
        "bypass_mode=true takes the old log-probs from the rollout" in problem and "set it to true" in problem
    )


# -- the worker's side: the staleness gate and the truncated IS weights ----------------------------------


class _StateOnly:
    """A backend that only answers `state()` (what the staleness gate reads)."""

    def __init__(self, trainer_version: int) -> None:
        self.trainer_version = trainer_version

    async def state(self):
        from arctic_rl_core.backends.protocol import BackendState, InferenceState, TrainingState

        awake_i, awake_t = InferenceState.AWAKE, TrainingState.AWAKE
        return BackendState(awake_i, awake_t, self.trainer_version, self.trainer_version, False)


def _gate_worker(trainer_version: int, *, k: int, epochs: int = 1):
    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.trace import TraceWriter
    from adapter_verl.worker import ArcticActorRolloutRefWorker
    from arctic_rl_core.config import ArcticRLConfig

    cfg = ArcticRLConfig.from_dict(
        {
            "backend": {"kind": "reference"},
            "placement": {"colocate": False},
            "batch": {"epochs": epochs},
            "async": {"max_staleness": k},
        }
    )
    worker = ArcticActorRolloutRefWorker.__new__(ArcticActorRolloutRefWorker)
    worker._settings = ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path="unused",
    )
    worker._arctic_config = cfg
    worker._backend = _StateOnly(trainer_version)
    worker._trace = TraceWriter(None, "worker0")
    return worker


def test_the_worker_trains_rows_within_the_bound_and_reports_their_staleness():
    worker = _gate_worker(trainer_version=4, k=2, epochs=2)  # after verl step 2 of 2 epochs each
    # versions 2, padding (-1), 4, 4 against 4: stale 2, 0, 0 optimizer steps
    assert worker._check_staleness([2, -1, 4, 4], rows=4) == [2, 0, 0]
    metrics = worker._async_step_metrics([2, 0, 0], [])
    assert metrics["async/staleness_max"] == 2.0 and metrics["async/max_staleness"] == 2.0
    assert metrics["async/staleness_mean"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("versions", "says"), [([0, 2], r"staleness 2 > async.max_staleness=1"), ([3], "ahead of the trainer")]
)
def test_the_worker_refuses_a_stale_or_future_row_before_training(versions, says):
    from arctic_rl_core.async_grpo.staleness import StaleRolloutError

    worker = _gate_worker(trainer_version=2, k=1)
    with pytest.raises(StaleRolloutError, match=says):
        worker._check_staleness(versions, rows=len(versions))


def test_truncated_is_weights_are_capped_per_token_and_counted():
    import math

    from adapter_verl.worker import truncated_is_samples
    from arctic_rl_core.wire import RolloutSample

    sample = RolloutSample(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5],
        response_mask=[1, 1, 0],
        old_logprobs=[-1.0, -0.5, -0.1],
        rollout_logprobs=[-1.5, -2.0, -3.0],
    )
    (out,), stats = truncated_is_samples([sample], cap=2.0)
    # masked-out tokens weigh 1 (the loss ignores them anyway)
    assert out.rollout_is_weights == pytest.approx([math.exp(0.5), 2.0, 1.0])
    # statistics over the masked-in tokens only: exp(0.5) and the capped exp(1.5)
    assert (stats.max, stats.tokens, stats.clipped_fraction) == (2.0, 2, 0.5)
    assert stats.min == pytest.approx(math.exp(0.5))


def test_the_demos_async_option_is_verls_separate_async(tmp_path):
    """`arctic-rl demo --framework verl --async 1`: verl's own separate-async fields, checked like any
    verl command line, give the core's async.max_staleness = 1 on separate devices."""
    from adapter_verl.config import resolve
    from adapter_verl.demo_driver import run_grpo, verl_overrides
    from adapter_verl.main import compose, with_arctic_defaults
    from arctic_rl_testbed.demo.drivers import supports_async
    from arctic_rl_testbed.demo.options import DemoOptions

    options = DemoOptions(framework="verl", out=str(tmp_path / "run"), steps=2, max_staleness=1)
    overrides = verl_overrides(
        options, train_file=tmp_path / "train.parquet", model_path=tmp_path / "model", steps_per_epoch=8
    )
    assert "trainer.v1.trainer_mode=arctic_separate_async" in overrides
    resolution = resolve(compose(with_arctic_defaults(overrides)[0]), 2)
    assert resolution.problems == []
    cfg = resolution.config
    assert (cfg.async_settings.max_staleness, cfg.placement.colocate) == (1, False)
    assert supports_async(run_grpo)


class _RecordingBackend(_StateOnly):
    """Answers the update's calls and keeps every training payload."""

    accepts_token_ids = True  # a backend that takes ids (the update trains every row's mask as verl built it)

    def __init__(self) -> None:
        super().__init__(trainer_version=0)
        self.payloads = []

    async def forward_backward(self, payload):
        from types import SimpleNamespace

        self.payloads.append(payload)
        return SimpleNamespace(loss=0.0, metrics={})

    async def step(self):
        from types import SimpleNamespace

        return SimpleNamespace(grad_norm=1.0, learning_rate=1e-3, step=len(self.payloads), metrics={})


@pytest.mark.parametrize("bypass", [False, True])
def test_in_bypass_mode_the_worker_sends_no_is_weights(bypass):
    """Old log-probs = the rollout's (verl's bypass mode): the update carries no rollout_is_weights; in the
    decoupled mode the same rows carry the core's truncated weights min(exp(old - rollout), cap)."""
    import math

    import torch
    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.trace import TraceWriter
    from adapter_verl.verl_internals import ROLLOUT_VERSIONS_KEY
    from adapter_verl.worker import ArcticActorRolloutRefWorker
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.wire import PayloadSpec
    from verl.utils import tensordict_utils as tu

    cfg = ArcticRLConfig.from_dict(
        {
            "backend": {"kind": "reference"},
            "placement": {"colocate": False},
            "batch": {
                "prompts_per_step": 2,
                "rollouts_per_prompt": 2,
                "mini_batch_prompts": 1,
                "micro_batch_size_per_gpu": 1,
                "max_prompt_length": 4,
                "max_response_length": 3,
            },
            "async": {"max_staleness": 1},
        }
    )
    worker = ArcticActorRolloutRefWorker.__new__(ArcticActorRolloutRefWorker)
    worker._rank = 0
    worker._settings = ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path="unused",
        old_logprobs_from_rollout=bypass,
    )
    worker._arctic_config = cfg
    worker._spec = PayloadSpec.from_config(cfg, pad_token_id=0)
    worker._backend = _RecordingBackend()
    worker._trace = TraceWriter(None, "worker0")
    worker.weights_version = 0
    rollout = [-0.5, -1.0, -1.5]
    old = rollout if bypass else [-0.25, -1.0, -1.5]  # bypass: verl copied the rollout's
    rows = [
        {
            "prompts": torch.tensor([5, 6]),
            "responses": torch.tensor([7, 8, 9]),
            "response_mask": torch.ones(3, dtype=torch.int64),
            "old_log_probs": torch.tensor(old),
            "rollout_log_probs": torch.tensor(rollout),
            "advantages": torch.full((3,), 1.0),
        }
        for _ in range(4)
    ]
    data = tu.list_of_dict_to_tensordict(rows)
    tu.assign_non_tensor(
        data,
        mini_batch_size=2,
        epochs=1,
        seed=42,
        dataloader_kwargs={"shuffle": False},
        **{ROLLOUT_VERSIONS_KEY: [0] * 4},
    )
    metrics = worker.update_actor(data)["metrics"]
    payloads = worker._backend.payloads
    assert len(payloads) == 2  # two mini-batches of 2 rows
    for payload in payloads:
        assert ("rollout_is_weights" in payload.batch) is not bypass
        if not bypass:
            weights = torch.as_tensor(payload.batch["rollout_is_weights"])
            assert weights[0, 4].item() == pytest.approx(math.exp(0.25))  # first response token
    assert metrics["async/is_weight_max"] == [1.0 if bypass else pytest.approx(math.exp(0.25))]

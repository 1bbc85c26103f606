"""The forwarder worker: verl's actor/rollout/ref worker surface on a CPU Ray actor that sends
every computation to the core backend.

verl hands each method a TensorDict of jagged (nested) per-sample tensors read from
TransferQueue. The worker turns the rows into `arctic_rl_core.wire.RolloutSample`s, builds the one
canonical payload, and calls the backend; log-probs come back shifted (`[b, i] = log p(token
i+1)`), which is exactly verl's predict-next alignment over prompt+response, so the returned
`log_probs`/`entropy` are jagged full-sequence tensors with each response's values at positions
`P-1 .. P+R-2` and zeros elsewhere.

Only rank 0 talks to the backend (the server does its own data parallelism): every mesh maps all
ranks to dp rank 0 and only rank 0 collects.

Over a text-only sampler (the on-prem Arctic server) each trained row's sampled turns are checked
before the update (`arctic_rl_core.multi_turn.trajectory_fidelity.row_fidelity`): a turn whose preceding ids the server
read differently, and every later turn of its row, is left out of the loss (mask 0); the step logs
the share of such turns as `token_drift/turns` (0 by construction over a backend that takes ids).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from arctic_rl_core import dispatch
from arctic_rl_core.async_grpo.is_weights import combined_is_stats, truncated_is_weights, weights_per_sample
from arctic_rl_core.async_grpo.metrics import step_metrics
from arctic_rl_core.async_grpo.staleness import StalenessGate
from arctic_rl_core.backends.old_logprobs import from_sampler, sampled_token_entropy, sampler_logprobs
from arctic_rl_core.checkpoint_folder import backend_checkpoint_root, step_of
from arctic_rl_core.checkpoint_manifest import backend_save
from arctic_rl_core.multi_turn.prompt_text import PromptText
from arctic_rl_core.multi_turn.trajectory_fidelity import DRIFTED_TURNS, drift_metrics, row_fidelity
from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
from arctic_rl_core.wire import (
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    payload_to_trace_record,
    response_logprobs,
)
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import hf_tokenizer
from verl.utils import tensordict_utils as tu

from adapter_verl.session import lookup_session
from adapter_verl.trace import TraceWriter
from adapter_verl.verl_internals import ROLLOUT_VERSIONS_KEY, collect_on_rank0

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.is_weights import ISWeightStats
    from arctic_rl_core.backends.protocol import Backend
    from tensordict import TensorDict

    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.session import SessionInfo

logger = logging.getLogger(__name__)

MESHES = ("actor", "ref", "rollout")
_ONE_UPDATE_PER_SYNC = (
    "verl asked the forwarder for a saved copy of pi_old (trainer.v1.separate_async.parameter_sync_step > 1 "
    "with algorithm.rollout_correction.bypass_mode=false): the Arctic training job keeps one copy of the "
    "weights; set algorithm.rollout_correction.bypass_mode=true (old log-probs = the rollout's), or "
    "trainer.v1.separate_async.parameter_sync_step=1"
)


def _rows(data: TensorDict, key: str) -> list[torch.Tensor] | None:
    if key not in data.keys():  # noqa: SIM118 (TensorDict refuses `in`)
        return None
    value = data[key]
    return list(value.unbind(0))


def samples_from_tensordict(data: TensorDict, *, with_training_fields: bool) -> list[RolloutSample]:
    """verl's jagged rows -> core samples (response-aligned per-token values)."""

    prompts = _rows(data, "prompts")
    responses = _rows(data, "responses")
    masks = _rows(data, "response_mask")
    if prompts is None or responses is None:
        raise KeyError("the batch has no 'prompts'/'responses': it did not come from verl's agent loop")
    old = _rows(data, "old_log_probs") if with_training_fields else None
    ref = _rows(data, "ref_log_prob") if with_training_fields else None
    adv = _rows(data, "advantages") if with_training_fields else None
    rollout_lp = _rows(data, "rollout_log_probs") if with_training_fields else None
    # verl's algorithm.rollout_correction.rollout_is: per-token weights the server loss multiplies in
    is_weights = _rows(data, "rollout_is_weights") if with_training_fields else None

    def floats(rows: list[torch.Tensor] | None, i: int) -> list[float] | None:
        return None if rows is None else rows[i].to(torch.float32).tolist()

    samples = []
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        samples.append(
            RolloutSample(
                prompt_ids=p.tolist(),
                response_ids=r.tolist(),
                response_mask=None if masks is None else masks[i].tolist(),
                advantages=floats(adv, i) if adv is not None else 0.0,
                old_logprobs=floats(old, i),
                ref_logprobs=floats(ref, i),
                rollout_logprobs=floats(rollout_lp, i),
                rollout_is_weights=floats(is_weights, i),
            )
        )
    return samples


def _row_key(sample: RolloutSample) -> tuple:
    return (tuple(sample.prompt_ids), tuple(sample.response_ids))


def _with_mask(sample: RolloutSample, masks: dict[tuple, tuple[int, ...]]) -> RolloutSample:
    """`sample` with its row's trained mask (`_trained_masks`)."""

    return replace(sample, response_mask=list(masks[_row_key(sample)]))


def truncated_is_samples(
    samples: list[RolloutSample], *, cap: float
) -> tuple[list[RolloutSample], ISWeightStats]:
    """Each sample with the core's truncated IS weights (`arctic_rl_core.async_grpo.is_weights`) from its
    old and rollout log-probs, and their statistics over the masked-in response tokens."""

    lengths = [len(sample.response_ids) for sample in samples]
    width = max(lengths, default=0)
    old = torch.zeros(len(samples), width)
    rollout = torch.zeros(len(samples), width)
    mask = torch.zeros(len(samples), width, dtype=torch.bool)
    for b, sample in enumerate(samples):
        n = lengths[b]
        old[b, :n] = torch.tensor(sample.old_logprobs[:n], dtype=torch.float32)
        rollout[b, :n] = torch.tensor(sample.rollout_logprobs[:n], dtype=torch.float32)
        mask[b, :n] = (
            True if sample.response_mask is None else torch.tensor(sample.response_mask[:n], dtype=torch.bool)
        )
    weights, stats = truncated_is_weights(old, rollout, mask, cap)
    rows = weights_per_sample(weights, lengths)
    return [replace(sample, rollout_is_weights=row) for sample, row in zip(samples, rows, strict=True)], stats


def full_sequence_nested(values_B_R: torch.Tensor, samples: list[RolloutSample]) -> torch.Tensor:
    """Response-aligned `[B, R]` values -> jagged `[B, P_b + R_b]`, verl's predict-next layout."""
    rows = []
    for b, sample in enumerate(samples):
        p, r = len(sample.prompt_ids), len(sample.response_ids)
        row = torch.zeros(p + r, dtype=torch.float32)
        row[p - 1 : p - 1 + r] = values_B_R[b, :r].to(torch.float32)
        rows.append(row)
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class ArcticActorRolloutRefWorker(Worker):
    """verl's `ActorRolloutRefWorker` surface, forwarding to the core `Backend`."""

    def __init__(self, config: Any, role: str, **kwargs: Any) -> None:
        super().__init__()
        self.config = config
        self.role = role
        self._backend: Backend | None = None
        self._settings: ArcticVerlSettings | None = None
        self._spec: PayloadSpec | None = None
        self._trace = TraceWriter(None, role)
        self.weights_version: int | None = None
        # what the latest weight sync reports (rank 0), read by the trainer after each step
        self._sync_metrics: dict[str, float] = {}
        self._rollout_weights_version: int | None = None
        self._optimizer_steps: int | None = None
        self._drift_metrics: dict[str, float] = {}  # the last update's token_drift/turns
        self._tokenizer: Any = None

    # -- set-up ---------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        collect_on_rank0(self, MESHES)
        if self.rank != 0:
            return

        self.attach(lookup_session())

    def attach(self, info: SessionInfo) -> None:
        """Bind this worker to the run's backend and settings (`init_model` does it on rank 0)."""

        self._settings = info.settings
        self._backend = info.handle.connect()
        self._arctic_config = info.settings.arctic_config()
        self._spec = PayloadSpec.from_config(self._arctic_config, pad_token_id=self._pad_token_id())
        self._trace = TraceWriter(info.settings.trace_dir, f"worker{self.rank}")

    def _pad_token_id(self) -> int:
        tokenizer = hf_tokenizer(
            self.config.model.path, trust_remote_code=bool(self.config.model.get("trust_remote_code", False))
        )
        self._tokenizer = tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"tokenizer at {self.config.model.path} has neither a pad nor an eos token id")
        return int(pad)

    def _run(self, coro: Any) -> Any:
        return dispatch.run(coro)

    # -- log-probs ------------------------------------------------------------------------------
    def _forward(self, data: TensorDict, *, reference_model: bool) -> TensorDict | None:
        if self.rank != 0:
            return None

        if not reference_model and from_sampler(self._backend):
            return self._sampler_logprobs(data)

        calculate_entropy = bool(tu.get(data, "calculate_entropy", default=False)) and not reference_model
        # forward payloads carry no loss settings: the entropy bonus only matters in training
        spec = replace(
            self._spec,
            calculate_entropy=calculate_entropy,
            entropy_coeff=self._spec.entropy_coeff if calculate_entropy else 0.0,
        )
        samples = samples_from_tensordict(data, with_training_fields=False)
        payload = build_forward_payload(samples, spec)
        op = "forward_ref" if reference_model else "forward"
        self._trace.write(payload_to_trace_record(op, payload))
        start = time.perf_counter()
        out = self._run(self._backend.forward(payload, reference_model=reference_model))
        elapsed = time.perf_counter() - start
        logprobs_B_R, _ = response_logprobs(out.logprobs_B_S, payload, spec)
        fields = {"log_probs": full_sequence_nested(logprobs_B_R, samples)}
        if calculate_entropy:
            if out.entropy_B_S is None:
                raise RuntimeError("the backend returned no entropy although calculate_entropy was sent")
            entropy_B_R, _ = response_logprobs(out.entropy_B_S, payload, spec)
            fields["entropy"] = full_sequence_nested(entropy_B_R, samples)
        metrics = {**out.metrics, "forward_time_s": elapsed, "mfu": out.metrics.get("mfu", math.nan)}
        return tu.get_tensordict(tensor_dict=fields, non_tensor_dict={"metrics": metrics})

    def _sampler_logprobs(self, data: TensorDict) -> TensorDict:
        """The old-log-prob pass without a server forward (Cortex): the sampler's rollout log-probs
        (every generation asks for them there), and as entropy their sampled-token estimate."""

        start = time.perf_counter()
        samples = samples_from_tensordict(data, with_training_fields=False)
        rows = _rows(data, "rollout_log_probs")
        width = max(len(s.response_ids) for s in samples)
        values_B_R = torch.zeros((len(samples), width), dtype=torch.float32)
        mask_B_R = torch.zeros((len(samples), width), dtype=torch.bool)
        for b, sample in enumerate(samples):
            n = len(sample.response_ids)
            mask_B_R[b, :n] = True
            if rows is not None:
                if rows[b].numel() < n:
                    raise RuntimeError(
                        f"rollout_log_probs row {b} has {rows[b].numel()} values for {n} response tokens"
                    )
                values_B_R[b, :n] = rows[b][:n].to(torch.float32)
        logprobs_B_R = sampler_logprobs(
            None if rows is None else values_B_R, mask_B_R, where="rollout_log_probs"
        )
        fields = {"log_probs": full_sequence_nested(logprobs_B_R, samples)}
        if bool(tu.get(data, "calculate_entropy", default=False)):
            fields["entropy"] = full_sequence_nested(sampled_token_entropy(logprobs_B_R), samples)
        metrics = {"forward_time_s": time.perf_counter() - start, "mfu": math.nan}
        self._trace.write({"op": "old_logprobs_from_sampler", "rows": len(samples)})
        return tu.get_tensordict(tensor_dict=fields, non_tensor_dict={"metrics": metrics})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data: TensorDict) -> TensorDict | None:
        return self._forward(data, reference_model=False)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"))
    def compute_ref_log_prob(self, data: TensorDict) -> TensorDict | None:
        return self._forward(data, reference_model=True)

    # -- training -------------------------------------------------------------------------------
    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def update_actor(self, data: TensorDict) -> TensorDict | None:
        """verl's mini-batches x epochs (its own iterator, so the order matches stock verl): one
        forward-backward of the whole mini-batch and one optimizer step each."""
        if self.rank != 0:
            return None

        mini_batch_size = tu.pop(data, key="mini_batch_size", default=None)
        epochs = tu.pop(data, key="epochs", default=1)
        seed = tu.pop(data, key="seed", default=42)
        dataloader_kwargs = tu.pop(data, key="dataloader_kwargs", default={})
        expected = self._arctic_config.shape.train_batch_size
        if mini_batch_size != expected:
            raise ValueError(
                f"update_actor got mini_batch_size={mini_batch_size} rows but the payload spec was built for "
                f"{expected} (ppo_mini_batch_size x rollout.n): the trainer and the adapter settings disagree"
            )
        metrics: dict[str, list[float]] = {}
        rollout_versions = tu.pop(data, key=ROLLOUT_VERSIONS_KEY, default=None)
        if rollout_versions is None:
            # verl's sync trainer samples a step's rollouts on the weights synced before it
            self._rollout_weights_version = self.weights_version
            trained_staleness = None
        else:
            trained_staleness = self._check_staleness(list(rollout_versions), len(data))
        is_stats: list[ISWeightStats] = []
        trained_masks = self._trained_masks(data)
        iterator = tu.make_iterator(
            data,
            mini_batch_size=mini_batch_size,
            epochs=epochs,
            seed=seed,
            dataloader_kwargs=dataloader_kwargs,
        )
        for mini_batch in iterator:
            samples = samples_from_tensordict(mini_batch, with_training_fields=True)
            if trained_masks is not None:
                samples = [_with_mask(s, trained_masks) for s in samples]
            if (
                rollout_versions is not None
                and self._arctic_config.async_settings.max_staleness > 0
                and not self._settings.old_logprobs_from_rollout
            ):
                samples, stats = self._off_policy_correction(samples)
                if stats is not None:
                    is_stats.append(stats)
            payload = build_train_payload(samples, self._spec)
            self._trace.write(payload_to_trace_record("forward_backward", payload))
            start = time.perf_counter()
            train = self._run(self._backend.forward_backward(payload))
            step = self._run(self._backend.step())
            self._trace.write(
                {"op": "step", "grad_norm": step.grad_norm, "lr": step.learning_rate, "step": step.step}
            )
            self._optimizer_steps = step.step
            row = {
                "loss": train.loss,
                "grad_norm": step.grad_norm,
                "lr": step.learning_rate,
                "update_time_s": time.perf_counter() - start,
                # the backend reports MFU when it can measure it; NaN means "not measured"
                "mfu": train.metrics.get("mfu", math.nan),
                **{k: v for k, v in train.metrics.items() if k != "mfu"},
                **{f"step/{k}": v for k, v in step.metrics.items()},
            }
            for key, value in row.items():
                metrics.setdefault(key, []).append(float(value))
        if not metrics:
            raise ValueError(
                f"update_actor produced no mini-batch from {len(data)} rows (mini_batch_size={mini_batch_size})"
            )
        if trained_staleness is not None:
            for key, value in self._async_step_metrics(trained_staleness, is_stats).items():
                metrics[key] = [value]
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})

    # -- asynchronous training (verl's separate_async mode) -----------------------------------------
    def _async_step_metrics(
        self, trained_staleness: list[int], is_stats: list[ISWeightStats]
    ) -> dict[str, float]:
        """The core's `async/*` step metrics over the trained rows (verl logs them as `actor/async/*`), less
        the group counts: verl's replay buffer drops stale groups and counts them itself
        (`<partition>/off_policy/evicted_samples`)."""

        out = step_metrics(
            max_staleness=self._arctic_config.async_settings.max_staleness,
            trained_staleness=trained_staleness,
            dropped_groups=0,
            regenerated_groups=0,
            is_stats=combined_is_stats(is_stats),
        )
        # verl's own counts: rows, not groups, reach the worker
        verl_counts = ("async/trained_groups", "async/dropped_groups", "async/regenerated_groups")
        return {k: v for k, v in out.items() if k not in verl_counts}

    def _check_staleness(self, versions: list[int], rows: int) -> list[int]:
        """Every row's sampling version (the backend's weights version the replica reported for it, verl's
        `min_global_steps`; -1 for verl's padding rows) through the core's staleness gate, before anything
        is trained: a row sampled with weights version v may be trained with the trainer at version s only
        if 0 <= s - v <= k (`StalenessGate.assert_within`). verl's replay buffer drops (or waits for) older
        groups first, so a failure here means its bound and the core's disagree. Returns the trained rows'
        staleness."""

        if len(versions) != rows:
            raise ValueError(
                f"update_actor got {len(versions)} rollout versions for {rows} rows: the trainer and the "
                "worker disagree on the batch"
            )
        gate = StalenessGate.from_config(self._arctic_config)
        trainer_version = self._run(self._backend.state()).trainer_version
        real = [int(v) for v in versions if v >= 0]
        if not real:
            raise ValueError("update_actor got only padding rows: nothing to train")
        gate.assert_within(real, trainer_version)
        self._rollout_weights_version = min(real)
        self._trace.write(
            {
                "op": "staleness",
                "trainer_version": trainer_version,
                "rollout_versions": real,
                "max_staleness": gate.max_staleness,
            }
        )
        return [gate.staleness(v, trainer_version) for v in real]

    def _off_policy_correction(
        self, samples: list[RolloutSample]
    ) -> tuple[list[RolloutSample], dict[str, float]]:
        """verl's own rollout correction when it computed weights (`algorithm.rollout_correction.rollout_is`);
        otherwise the core's truncated importance-sampling weights min(exp(old - rollout), cap) per response
        token (`async.is_weight_cap`), sent as rollout_is_weights."""
        if all(sample.rollout_is_weights is not None for sample in samples):
            return samples, None
        missing = [i for i, sample in enumerate(samples) if sample.rollout_logprobs is None]
        if missing:
            raise ValueError(
                f"rows {missing[:5]} carry no rollout log-probs: the off-policy correction of "
                "asynchronous training needs actor_rollout_ref.rollout.calculate_log_probs=true"
            )
        return truncated_is_samples(samples, cap=self._arctic_config.async_settings.is_weight_cap)

    # -- weights --------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int | None = None, mode: str = "auto") -> dict[str, float]:
        """verl's naive checkpoint engine calls only this: run the core weight-sync policy; the
        rollout servers learn the new version from the backend's generate results."""
        if mode not in ("auto", "naive"):
            raise ValueError(
                f"update_weights(mode={mode!r}): the Arctic path syncs through its backend only (naive)"
            )
        if self.rank != 0:
            return {}

        start = time.perf_counter()
        policy = WeightSyncPolicy.from_config(self._arctic_config)
        self.weights_version = await sync_after_step(self._backend, policy)
        self._trace.write(
            {"op": "update_weights", "global_steps": global_steps, "weights_version": self.weights_version}
        )
        self._sync_metrics = {
            "arctic/weights_version": float(self.weights_version),
            "arctic/sync_time_s": time.perf_counter() - start,
            **(
                {"arctic/rollout_weights_version": float(self._rollout_weights_version)}
                if self._rollout_weights_version is not None
                else {}
            ),
            **(
                {"arctic/optimizer_steps": float(self._optimizer_steps)}
                if self._optimizer_steps is not None
                else {}
            ),
        }
        return dict(self._sync_metrics)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sync_metrics(self) -> dict[str, float]:
        """The latest weight sync's metrics (rank 0; {} on the others): the weights version the
        sampler now serves, the one this step's rollouts used, the optimizer steps taken, the
        sync time; and the last update's `token_drift/turns`. verl's naive checkpoint engine drops
        `update_weights`' return value, so the trainer asks here after each sync."""
        return {**self._sync_metrics, **self._drift_metrics}

    def _trained_masks(self, data: TensorDict) -> dict[tuple, tuple[int, ...]] | None:
        """Over a text-only sampler: each row's mask with the turns the sampler read other ids for left
        out (`trajectory_fidelity.row_fidelity`), by (prompt, response) ids; None over a backend that
        takes ids (the sampler read the row's ids). Sets this step's `token_drift/turns`."""

        if self._backend.accepts_token_ids:
            self._drift_metrics = {DRIFTED_TURNS: 0.0}
            return None

        text = PromptText(self._tokenizer)
        masks: dict[tuple, tuple[int, ...]] = {}
        fidelities = []
        for sample in samples_from_tensordict(data, with_training_fields=False):
            mask = sample.response_mask or [1] * len(sample.response_ids)
            fidelity, masks[_row_key(sample)] = row_fidelity(
                sample.prompt_ids, sample.response_ids, mask, text
            )
            fidelities.append(fidelity)
        self._drift_metrics = {DRIFTED_TURNS: drift_metrics(fidelities).get(DRIFTED_TURNS, 0.0)}
        drifted = [f for f in fidelities if f.drifted]
        if drifted:
            self._trace.write(
                {
                    "op": "token_drift",
                    "rows": len(drifted),
                    "turns_left_out": sum(f.turns - f.exact_turns for f in drifted),
                    "turns": sum(f.turns for f in drifted),
                }
            )
        return masks

    # -- checkpoints ----------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ) -> str | None:
        if self.rank != 0:
            return None
        if hdfs_path is not None:
            raise ValueError(
                f"trainer.default_hdfs_dir={hdfs_path!r}: the Arctic backend saves to local paths only"
            )
        # One backend folder for every step (`<default_local_dir>/arctic_backend/checkpoint-<n>`,
        # arctic_rl_core.checkpoint_folder), so that the server keeps checkpoint.save_total_limit of them
        # (mapped from trainer.max_actor_ckpt_to_keep; verl passes the same count here, or 1 with its
        # deprecated remove_previous_ckpt_in_save); verl's global_step_<n>/actor folder names the step.
        root = backend_checkpoint_root(local_path)
        checkpoint = self._arctic_config.checkpoint
        limit = max_ckpt_to_keep if max_ckpt_to_keep is not None and max_ckpt_to_keep > 0 else None
        with backend_save(root, global_step):  # names the step and what a server leaves
            saved = self._run(
                self._backend.save_checkpoint(
                    root,
                    global_step,
                    export_hf=checkpoint.export_hf,
                    save_total_limit=limit if limit is not None else checkpoint.save_total_limit,
                )
            )
        self._trace.write(
            {"op": "save_checkpoint", "path": root, "verl_path": local_path, "step": global_step}
        )
        return saved

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        if self.rank != 0:
            return None
        step = step_of(local_path)
        root = backend_checkpoint_root(local_path)
        self._run(self._backend.load_checkpoint(root, step))
        self._trace.write({"op": "load_checkpoint", "path": root, "verl_path": local_path, "step": step})
        return None

    # verl's separate-async trainer keeps pi_old on the CPU for parameter_sync_step > 1 in its decoupled mode
    # (bypass_mode=false); the Arctic path runs that mode with parameter_sync_step=1 only (checked at dry
    # run): the backend's current weights are pi_old for the one update of each step, so there is nothing to
    # save. In bypass mode verl calls none of these (the old log-probs are the rollout's).
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n: int) -> None:
        if n != 0:
            raise ValueError(_ONE_UPDATE_PER_SYNC)
        return None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def restore_model_from_cpu(self, n: int) -> None:
        raise ValueError(_ONE_UPDATE_PER_SYNC)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def clear_cpu_model(self, n: int) -> None:
        raise ValueError(_ONE_UPDATE_PER_SYNC)

    # Stock methods verl may call around training; nothing to move on a forwarder.
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        return None

"""SkyRL's trainer and experiment, with the Arctic dispatch and generator in place of SkyRL's
FSDP/Megatron workers and vLLM engines.

`ArcticPPOExp(cfg).run()` is the whole run: SkyRL's dataloader, advantages, loop, checkpoint
schedule and tracker; the core backend does generation, log-probs, the loss and the optimizer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from arctic_rl_core.checkpoint_manifest import (
    CheckpointFolder,
    step_save,
    verify,
    write_manifest,
)
from arctic_rl_core.run_lock import RunFolderLock
from loguru import logger
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import ResumeMode, cleanup_old_checkpoints

from adapter_skyrl.config import DEFAULT_BACKEND, align_with_arctic, translate
from adapter_skyrl.dispatch import ArcticWorkerDispatch
from adapter_skyrl.generator import ArcticGenerator, combine_call_metrics
from adapter_skyrl.inference_client import ArcticInferenceClient
from adapter_skyrl.skyrl_internals import no_inference_servers

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.config import ArcticRLConfig
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.generators.base import GeneratorOutput

    from adapter_skyrl.trace import PayloadTrace


SKYRL_LATEST_FILE = "latest_ckpt_global_step.txt"  # SkyRL's record of its latest checkpoint


class BackendReferenceModel:
    """Stands where SkyRL keeps its reference actor group: reference log-probs come from the
    backend's frozen reference model (`Backend.forward(..., reference_model=True)`)."""

    def __repr__(self) -> str:
        return "BackendReferenceModel()"


class ArcticPPOTrainer(RayPPOTrainer):
    """SkyRL's `RayPPOTrainer` whose models live on a core backend. The fully asynchronous trainer
    (`adapter_skyrl.fully_async`) puts these hooks before SkyRL's `FullyAsyncRayPPOTrainer`."""

    def __init__(self, *args: Any, dispatch: ArcticWorkerDispatch, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._arctic_dispatch = dispatch
        self._fwd_source: TrainingInputBatch | None = None
        # dynamic sampling: (rollouts, generator metrics) of each generate call of the step so far
        self._step_calls: list[tuple[int, dict[str, float]]] = []

    def build_models(self, PolicyWorker: Any = None, CriticWorker: Any = None, RefWorker: Any = None) -> None:
        """No SkyRL workers: the dispatch talks to the backend."""
        algo = self.cfg.trainer.algorithm
        self.dispatch = self._arctic_dispatch
        self.dispatch.metrics_sink = lambda: self.all_metrics
        self.policy_model = None
        self.critic_model = None
        self.ref_model = BackendReferenceModel() if (algo.use_kl_loss or algo.use_kl_in_reward) else None
        logger.info(
            f"Arctic dispatch ready: backend={type(self.dispatch.backend).__name__}, ref={self.ref_model}"
        )

    def handle_dynamic_sampling(
        self, generator_output: GeneratorOutput, uids: list[str]
    ) -> tuple[GeneratorOutput, list[str], bool]:
        """SkyRL's dynamic sampling (`trainer.algorithm.dynamic_sampling`: filter or replace), which
        may take several generate calls for one step. SkyRL logs only the last call's generator
        metrics; when the step's batch is complete they are those of all its calls
        (`combine_call_metrics`), with `generate/dynamic_sampling_calls` their number."""
        if self.dynamic_sampling_state is None:  # SkyRL's state: None when a step's sampling starts
            self._step_calls = []
        rollouts = len(generator_output["response_ids"])
        self._step_calls.append(
            (rollouts, {k: v for k, v in self.all_metrics.items() if k.startswith("generate/")})
        )
        ds = self.cfg.trainer.algorithm.dynamic_sampling
        n = int(self.cfg.generator.n_samples_per_prompt)
        if ds.type == "filter" and not any(varied_groups(generator_output["rewards"], uids, n).values()):
            return generator_output, uids, self._count_empty_filter_batch()
        output, uids, keep_sampling = super().handle_dynamic_sampling(generator_output, uids)
        if not keep_sampling:
            self.all_metrics.update(combine_call_metrics(self._step_calls))
            self.all_metrics["generate/dynamic_sampling_calls"] = float(len(self._step_calls))
            self._step_calls = []
        return output, uids, keep_sampling

    def _count_empty_filter_batch(self) -> bool:
        """A filter batch with no group to keep. SkyRL 0.4.0 slices the output to no rows there and
        fails (`slice_generator_output`: "indices must be non-empty"); such a batch adds nothing to
        the step, so it is counted against max_sample_batches, with SkyRL's error at the limit, and
        sampling goes on. Returns keep_sampling (True)."""
        ds = self.cfg.trainer.algorithm.dynamic_sampling
        state = dict(self.dynamic_sampling_state or {})
        state["sample_batch_count"] = int(state.get("sample_batch_count", 0)) + 1
        if ds.max_sample_batches > 0 and state["sample_batch_count"] >= ds.max_sample_batches:
            raise RuntimeError(
                f"Exiting training loop due to hitting dynamic sampling limit for {ds.type} strategy with "
                f"{ds.max_sample_batches} max sample batches. Please check your data difficulty distribution."
            )
        self.dynamic_sampling_state = state
        return True

    def convert_to_training_input(
        self, generator_output: GeneratorOutput, uids: list[str]
    ) -> TrainingInputBatch:
        """SkyRL's conversion. After dynamic sampling's replace, a copied group carries the uid of the
        group it copies (SkyRL's `handle_replace_sampling`: its advantages are computed with that
        group's, as POLARIS does), but SkyRL 0.4.0's mini-batch boundaries count prompts by runs of
        equal uids and assert that there are train_batch_size of them, which fails on every step
        with a replacement. The boundaries are computed here with each copy's own slot uid
        (`<uid>#copy<k>`); the batch keeps SkyRL's uids for the advantages."""
        if self.cfg.trainer.algorithm.dynamic_sampling.type != "replace":
            return super().convert_to_training_input(generator_output, uids)
        slots = group_slot_uids(uids, int(self.cfg.generator.n_samples_per_prompt))
        batch = super().convert_to_training_input(generator_output, slots)
        if slots != uids:
            batch.metadata["uids"] = list(uids)
        return batch

    def fwd_logprobs_values_reward(self, training_input: TrainingInputBatch) -> TrainingInputBatch:
        self._fwd_source = training_input
        try:
            return super().fwd_logprobs_values_reward(training_input)
        finally:
            self._fwd_source = None

    def _execute_forward_pass(
        self,
        model: str,
        data_fwd_pass: TrainingInputBatch,
        key: str,
        mini_batch_boundaries: list[tuple[int, int]] | None,
    ) -> Any:
        """SkyRL's forward batch carries only sequences and attention mask (its workers read the
        last `response_length` columns); the wire needs each row's prompt/response split, so the
        response mask travels along, and so do the rollout log-probs (the old log-probs on a backend
        without forward)."""
        data_fwd_pass["response_mask"] = self._fwd_source["response_mask"]
        rollout_logprobs = self._fwd_source.get("rollout_logprobs")
        if rollout_logprobs is not None:  # what the old-log-prob pass serves on Cortex (no forward)
            data_fwd_pass["rollout_logprobs"] = rollout_logprobs
        return super()._execute_forward_pass(model, data_fwd_pass, key, mini_batch_boundaries)

    def _normalize_advantages(
        self,
        data: TrainingInputBatch,
        mini_batch_boundaries: list[tuple[int, int]],
        prompt_boundaries: list[tuple[int, int]] | None = None,
    ) -> TrainingInputBatch:
        """SkyRL's advantage batch normalisation (when enabled), but NOT its loss-reduction
        pre-scaling where the Arctic server aggregates the loss itself (`loss.loss_agg_mode`, mapped
        from `trainer.algorithm.loss_reduction`): pre-scaled advantages would be reduced twice. The
        reductions that depend on SkyRL's own grouping of the rows (token_mean_legacy, prompt_mean)
        keep SkyRL's scaling, computed by SkyRL, and the server sums them (`adapter_skyrl.loss_reductions`)."""
        from adapter_skyrl.loss_reductions import keeps_skyrl_scaling

        if keeps_skyrl_scaling(self.cfg.trainer.algorithm.loss_reduction):
            return super()._normalize_advantages(data, mini_batch_boundaries, prompt_boundaries)
        if self.cfg.trainer.algorithm.advantage_batch_normalize:
            advantages, response_mask = data["advantages"], data["response_mask"]
            num_actions = response_mask.sum()
            mean = advantages.mean()
            std = ((advantages - mean).pow(2) * response_mask).sum()
            rstd = (std / num_actions).clamp(min=1e-8).rsqrt()
            data["advantages"] = (advantages - mean) * rstd
        return data

    def _cleanup_old_checkpoints(self) -> None:
        """Checkpoints live where this process writes them (no SkyRL worker nodes to visit)."""
        cleanup_old_checkpoints(self.cfg.trainer.ckpt_path, self.cfg.trainer.max_ckpts_to_keep)

    # -- checkpoints: checked before any state is used (arctic_rl_core.checkpoint_manifest) -------
    def checkpoint_folder(self) -> CheckpointFolder:
        return CheckpointFolder(Path(self.cfg.trainer.ckpt_path), SKYRL_LATEST_FILE)

    def save_checkpoints(self) -> str:
        """SkyRL's save (and the fully async trainer's state file), then the step folder's manifest:
        every file with its size and SHA-256, which a resume checks first."""
        step_folder = self.checkpoint_folder().step_folder(self.global_step)
        # any failure (a full disk: torch.save's RuntimeError hides the errno) leaves no partial step
        # folder (the latest file names the last whole one) and one message naming it
        with step_save(self.checkpoint_folder(), step_folder):
            folder = super().save_checkpoints()
            data = Path(folder) / "data.pt"
            if not data.is_file() or data.stat().st_size == 0:  # SkyRL logs this failure and goes on
                raise OSError(f"{data}: SkyRL could not save the dataloader state (its log says why)")
            write_manifest(folder)
        return folder

    def load_checkpoints(self) -> Any:
        """Every file of the checkpoint checked before SkyRL reads any: SkyRL 0.4.0 restarts at step 1
        without `latest_ckpt_global_step.txt` and trains on after a warning when `data.pt` is damaged
        (the data order then differs); here both stop with `CheckpointDamaged` naming the file."""
        if self.resume_mode == ResumeMode.LATEST:
            self.checkpoint_folder().resume_point()
        elif self.resume_mode == ResumeMode.FROM_PATH:
            verify(self.cfg.trainer.resume_path)
        return super().load_checkpoints()

    async def train(self) -> None:
        """SkyRL's loop, except after a resume from the checkpoint of the last step: SkyRL 0.4.0 would
        train one step past `total_training_steps` (it checks the limit only after a step). The
        checkpoint is loaded and synced to the sampler, as the loop would leave them, and nothing is
        trained."""
        done = self.checkpoint_folder().resume_point() if self.resume_mode == ResumeMode.LATEST else None
        if done is not None and self.total_training_steps is not None and done >= self.total_training_steps:
            logger.info(f"step {done} of {self.total_training_steps} is checkpointed: nothing left to train")
            self.init_weight_sync_state()
            self.global_step = int(self.load_checkpoints()[0])
            await self.dispatch.save_weights_for_sampler()
            return
        await super().train()

    def train_critic_and_policy(self, data: TrainingInputBatch) -> dict[str, float]:
        status = super().train_critic_and_policy(data)
        for key, value in self.dispatch.pop_metrics().items():
            self.all_metrics[f"arctic/{key}"] = value
        client = getattr(self.generator, "inference_engine_client", None)
        if isinstance(client, ArcticInferenceClient):  # the sampler's queue since the previous step
            self.all_metrics.update(client.queue_metrics())
        return status


class ArcticPPOExp(BasePPOExp):
    """SkyRL's experiment with the Arctic hooks: tokenizer and backend from the core config, no
    inference engines, no FSDP/Megatron workers.

    `backend`: an already-built core backend; `backend_factory`: builds one from the run's core
    config (e.g. the reference engine as a Ray actor); neither: `build_backend`, the backend
    `trainer.arctic_rl.backend` describes.
    """

    def __init__(
        self,
        cfg: SkyRLTrainConfig,
        *,
        backend: Backend | None = None,
        backend_factory: Callable[[ArcticRLConfig], Backend] | None = None,
        trace: PayloadTrace | None = None,
    ):
        self.cfg = cfg
        self.backend_settings = backend_settings(cfg)
        self.tokenizer = self._build_tokenizer()
        self.train_dataset = self.get_train_dataset()
        self.eval_dataset = self.get_eval_dataset()
        self.colocate_pg = None
        no_inference_servers(self)
        # Fully async: generate calls and weight syncs through one gate (arctic_rl_core.async_grpo.sync_gate)
        self.sync_gate = None
        if cfg.trainer.fully_async.enabled:
            from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate

            self.sync_gate = GenerationSyncGate()
        # The schedule horizon needs the dataloader length: recompute with the real one.
        steps_per_epoch = len(self.train_dataset) // cfg.trainer.train_batch_size
        translation = translate(cfg, steps_per_epoch=steps_per_epoch)
        self.arctic_cfg = translation.raise_for_issues()
        self.translation = translation
        # SkyRL's view of the run is the Arctic run's (DP, micro-batch; no SkyRL engines to colocate).
        align_with_arctic(cfg, self.arctic_cfg)
        from arctic_rl_core.config.settings_table import render_settings_table

        from adapter_skyrl.field_table import FRAMEWORK

        logger.info(
            "\n"
            + render_settings_table(
                self.arctic_cfg,
                framework=FRAMEWORK,
                not_applied=translation.not_applied,
                notices=translation.notices,
            )
        )
        if backend is not None and backend_factory is not None:
            raise ValueError("pass either backend or backend_factory, not both")
        # One writer per checkpoint folder, from before the backend starts (it may clean up jobs a
        # stopped run of this folder left on the server) to the end of `run`
        self.run_lock = RunFolderLock(cfg.trainer.ckpt_path).acquire()
        self.backend = backend if backend is not None else (backend_factory or build_backend)(self.arctic_cfg)
        self._owns_backend = backend is None  # a backend passed in stays the caller's to shut down
        trace_path = getattr(cfg.trainer, "arctic_trace_path", None)
        if trace is None and trace_path:
            from adapter_skyrl.trace import PayloadTrace

            trace = PayloadTrace(trace_path)
        self.trace = trace

    def run(self) -> None:
        """SkyRL's run; then the backend this experiment created is shut down (Arctic jobs it
        started are destroyed), whether training finished or failed."""
        try:
            super().run()
        finally:
            try:
                if self._owns_backend:
                    from arctic_rl_core.dispatch import run as run_coroutine

                    run_coroutine(self.backend.shutdown())
            finally:
                self.run_lock.release()

    # -- hooks ----------------------------------------------------------------------------------
    def _build_tokenizer(self) -> Any:
        if self.backend_settings.kind == "reference":
            from arctic_rl_testbed.reference.tokenizer import build_tokenizer

            tokenizer = build_tokenizer(self.backend_settings.reference.tokenizer_path)
        else:
            from skyrl.utils.tok import get_tokenizer

            tokenizer = get_tokenizer(
                self.cfg.trainer.policy.model.path,
                trust_remote_code=True,
                use_fast=not self.cfg.trainer.disable_fast_tokenizer,
                padding_side="left",
            )
        if tokenizer.pad_token_id is None:
            raise ValueError("the policy tokenizer has no pad token: the Arctic wire needs pad_token_id")
        return tokenizer

    def _dataset(self, files: list[str]) -> PromptDataset:
        # SkyRL hardcodes 8 filter workers; use the configured dataloader workers (at least 1).
        return PromptDataset(
            datasets=files,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=max(1, int(self.cfg.data.dataloader.num_workers or 1)),
        )

    def get_train_dataset(self) -> PromptDataset:
        dataset = self._dataset(self.cfg.data.train_data)
        if len(dataset) < self.cfg.trainer.train_batch_size:
            raise ValueError(
                f"data.train_data has {len(dataset)} prompts after length filtering, fewer than "
                f"trainer.train_batch_size={self.cfg.trainer.train_batch_size}"
            )
        return dataset

    def get_eval_dataset(self) -> PromptDataset | None:
        if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
            return self._dataset(self.cfg.data.val_data)
        return None

    def get_colocate_pg(self, timeout: int = 0) -> None:
        return None

    def get_inference_client(self) -> None:
        """The backend serves generation: there is no SkyRL inference engine or router."""
        return None

    def get_generator(
        self, cfg: SkyRLTrainConfig, tokenizer: Any, inference_engine_client: Any
    ) -> ArcticGenerator:
        return self.build_generator(ArcticGenerator, tokenizer)

    def build_generator(self, cls: type[ArcticGenerator], tokenizer: Any) -> ArcticGenerator:
        """SkyRL's generator (`cls`: `ArcticGenerator` or a subclass) with SkyRL's generator and
        environment settings, sampling through the backend (`ArcticInferenceClient`)."""
        client = ArcticInferenceClient(
            self.backend,
            tokenizer,
            model_name=str(self.cfg.trainer.policy.model.path),
            max_batch=int(self.cfg.generator.inference_engine.max_num_seqs),
            sync_gate=self.sync_gate,
        )
        return cls(
            self.cfg.generator,
            self.cfg.environment.skyrl_gym,
            client,
            tokenizer,
            **self.generator_async_options(),
        )

    def generator_async_options(self) -> dict[str, Any]:
        """Synchronous: every rollout uses exactly the last sync's weights (checked per generate call).
        Fully async: the trainer checks each group's version against `async.max_staleness` when it
        trains it (a sync may land while a group is in flight) and the generator keeps inputs for
        regeneration (generation and weight sync share the run's `GenerationSyncGate` in the client)."""
        if self.cfg.trainer.fully_async.enabled:
            return {"expected_weights_version": None, "remember_inputs": True}
        return {"expected_weights_version": self._synced_version}

    def _synced_version(self) -> int | None:
        """The weights version of the last sync (None before the trainer exists)."""
        trainer = getattr(self, "trainer", None)
        dispatch = getattr(trainer, "dispatch", None) if trainer is not None else None
        return dispatch.weights_version if isinstance(dispatch, ArcticWorkerDispatch) else None

    def build_dispatch(self) -> ArcticWorkerDispatch:
        from arctic_rl_core.weight_sync import WeightSyncPolicy
        from arctic_rl_core.wire import PayloadSpec

        spec = PayloadSpec.from_config(self.arctic_cfg, pad_token_id=int(self.tokenizer.pad_token_id))
        return ArcticWorkerDispatch(
            self.cfg,
            self.backend,
            spec,
            WeightSyncPolicy.from_config(self.arctic_cfg),
            trace=self.trace,
            checkpoint=self.arctic_cfg.checkpoint,
            sync_gate=self.sync_gate,
        )

    def trainer_class(self) -> type[ArcticPPOTrainer]:
        """SkyRL's synchronous trainer, or its fully asynchronous one (`trainer.fully_async.enabled`)."""
        if self.cfg.trainer.fully_async.enabled:
            from adapter_skyrl.fully_async import ArcticFullyAsyncPPOTrainer

            return ArcticFullyAsyncPPOTrainer
        return ArcticPPOTrainer

    def trainer_options(self) -> dict[str, Any]:
        if self.cfg.trainer.fully_async.enabled:
            return {"staleness": self.arctic_cfg.async_settings}
        return {}

    def _setup_trainer(self) -> ArcticPPOTrainer:
        """SkyRL's setup without importing the FSDP/Megatron workers (flash_attn) or vLLM."""
        logger.info(self.get_cfg_as_str(self.cfg))
        os.makedirs(self.cfg.trainer.export_path, exist_ok=True)
        os.makedirs(self.cfg.trainer.ckpt_path, exist_ok=True)
        tracker = self.get_tracker()
        generator = self.get_generator(self.cfg, self.tokenizer, None)
        trainer = self.trainer_class()(
            cfg=self.cfg,
            tracker=tracker,
            tokenizer=self.tokenizer,
            train_dataset=self.train_dataset,
            eval_dataset=self.eval_dataset,
            inference_engine_client=None,
            generator=generator,
            colocate_pg=None,
            dispatch=self.build_dispatch(),
            **self.trainer_options(),
        )
        trainer.trajectory_logger = self.get_trajectory_logger()
        self.trainer = trainer
        trainer.build_models()
        return trainer


def varied_groups(rewards: list[Any], uids: list[str], group_size: int) -> dict[str, bool]:
    """SkyRL's dynamic sampling rule for each prompt group (by uid): kept when its rewards (a
    token-level row summed) differ, or when groups have one sample."""
    by_uid: dict[str, list[float]] = {}
    for uid, reward in zip(uids, rewards, strict=True):
        by_uid.setdefault(uid, []).append(float(sum(reward)) if isinstance(reward, list) else float(reward))
    return {uid: group_size == 1 or float(np.std(values)) > 0 for uid, values in by_uid.items()}


def group_slot_uids(uids: list[str], group_size: int) -> list[str]:
    """`uids` with every repeated prompt group (of `group_size` consecutive rows) renamed
    `<uid>#copy<k>`, k counting its copies; unchanged when no group repeats."""
    if len(uids) % group_size:
        raise ValueError(f"{len(uids)} rows are not whole groups of n_samples_per_prompt={group_size}")
    seen: dict[str, int] = {}
    out = []
    for start in range(0, len(uids), group_size):
        uid = uids[start]
        group = uids[start : start + group_size]
        if any(u != uid for u in group):
            raise ValueError(f"rows {start}..{start + group_size - 1} are not one prompt group: {group}")
        copies = seen.get(uid, 0)
        seen[uid] = copies + 1
        out += [uid if copies == 0 else f"{uid}#copy{copies}"] * group_size
    return out


def backend_settings(cfg: SkyRLTrainConfig) -> Any:
    """The validated `backend` group of `trainer.arctic_rl` (needed before the dataset exists)."""
    from arctic_rl_core.config.schema import BackendSettings

    backend = dict(dict(cfg.trainer.arctic_rl or {}).get("backend") or {})
    backend.setdefault("kind", DEFAULT_BACKEND)
    return BackendSettings.model_validate(backend)


def build_backend(cfg: ArcticRLConfig) -> Backend:
    """The core backend `backend.kind` names."""
    if cfg.backend.kind == "reference":
        from arctic_rl_testbed.reference.engine import ReferenceBackend
        from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

        return ReferenceBackend(ReferenceEngineSettings.from_config(cfg))
    from arctic_rl_core.backends import arctic

    return arctic.ArcticBackend.from_config(cfg)

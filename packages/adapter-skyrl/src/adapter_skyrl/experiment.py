"""SkyRL's experiment with the Arctic hooks: `ArcticPPOExp(cfg).run()` is the whole run. It builds the
tokenizer and the backend from the core config, no inference engines and no FSDP/Megatron workers,
and SkyRL's synchronous trainer (`adapter_skyrl.trainer`) or its fully asynchronous one
(`adapter_skyrl.fully_async`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate
from arctic_rl_core.backends.registry import create_backend
from arctic_rl_core.config.schema import BackendSettings
from arctic_rl_core.config.settings_table import render_settings_table
from arctic_rl_core.dispatch import run as run_coroutine
from arctic_rl_core.run_lock import RunFolderLock
from arctic_rl_core.weight_sync import WeightSyncPolicy
from arctic_rl_core.wire import PayloadSpec
from loguru import logger
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.utils.tok import get_tokenizer

from adapter_skyrl.config import DEFAULT_BACKEND, align_with_arctic, translate
from adapter_skyrl.dispatch import ArcticWorkerDispatch
from adapter_skyrl.field_table import FRAMEWORK
from adapter_skyrl.fully_async import ArcticFullyAsyncPPOTrainer
from adapter_skyrl.generator import ArcticGenerator
from adapter_skyrl.inference_client import ArcticInferenceClient
from adapter_skyrl.skyrl_internals import no_inference_servers
from adapter_skyrl.trace import PayloadTrace
from adapter_skyrl.trainer import ArcticPPOTrainer

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.config import ArcticRLConfig
    from skyrl.train.config import SkyRLTrainConfig


class ArcticPPOExp(BasePPOExp):
    """SkyRL's experiment with the Arctic hooks: tokenizer and backend from the core config, no
    inference engines, no FSDP/Megatron workers.

    `backend`: an already-built core backend; `backend_factory`: builds one from the run's core
    config (e.g. the reference engine as a Ray actor); neither: the backend `trainer.arctic_rl.backend`
    describes, from the core's backend registry (`create_backend`).
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
            self.sync_gate = GenerationSyncGate()
        # The schedule horizon needs the dataloader length: recompute with the real one.
        steps_per_epoch = len(self.train_dataset) // cfg.trainer.train_batch_size
        translation = translate(cfg, steps_per_epoch=steps_per_epoch)
        self.arctic_cfg = translation.raise_for_issues()
        self.translation = translation
        # SkyRL's view of the run is the Arctic run's (DP, micro-batch; no SkyRL engines to colocate).
        align_with_arctic(cfg, self.arctic_cfg)

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
        self.backend = (
            backend if backend is not None else (backend_factory or create_backend)(self.arctic_cfg)
        )
        self._owns_backend = backend is None  # a backend passed in stays the caller's to shut down
        trace_path = getattr(cfg.trainer, "arctic_trace_path", None)
        if trace is None and trace_path:
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
                    run_coroutine(self.backend.shutdown())
            finally:
                self.run_lock.release()

    # -- hooks ----------------------------------------------------------------------------------
    def _build_tokenizer(self) -> Any:
        if self.backend_settings.kind == "reference":
            from arctic_rl_testbed.reference.tokenizer import build_tokenizer

            tokenizer = build_tokenizer(self.backend_settings.reference.tokenizer_path)
        else:
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


def backend_settings(cfg: SkyRLTrainConfig) -> Any:
    """The validated `backend` group of `trainer.arctic_rl` (needed before the dataset exists)."""

    backend = dict(dict(cfg.trainer.arctic_rl or {}).get("backend") or {})
    backend.setdefault("kind", DEFAULT_BACKEND)
    return BackendSettings.model_validate(backend)

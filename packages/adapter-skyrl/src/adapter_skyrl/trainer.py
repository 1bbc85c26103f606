"""SkyRL's trainer with the Arctic dispatch and generator in place of SkyRL's FSDP/Megatron workers
and vLLM engines (`adapter_skyrl.experiment.ArcticPPOExp` builds it; the fully asynchronous trainer,
`adapter_skyrl.fully_async`, builds on it): SkyRL's dataloader, advantages, loop, checkpoint schedule
and tracker; the core backend does generation, log-probs, the loss and the optimizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from arctic_rl_core.checkpoint_manifest import (
    CheckpointFolder,
    step_save,
    verify,
    write_manifest,
)
from loguru import logger
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import ResumeMode, cleanup_old_checkpoints

from adapter_skyrl.dispatch import ArcticWorkerDispatch
from adapter_skyrl.generator import combine_call_metrics
from adapter_skyrl.inference_client import ArcticInferenceClient
from adapter_skyrl.loss_reductions import keeps_skyrl_scaling

if TYPE_CHECKING:
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.generators.base import GeneratorOutput

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

"""The canonical parity scenario: one BIRD slice, seeds and settings, written once in the core
schema and rendered as SkyRL overrides and verl Hydra overrides.

Rollouts are fixed data, identical in every environment: per group (one BIRD question) rollout 0
is the gold SQL in the answer format (reward 1.0) and the others are sampled from the reference
engine with a fixed seed before any training (reward from the core BIRD scorer, usually 0). So
every group has a reward spread and the GRPO advantages are not all zero. Prompts are the
question text tokenised by the reference tokenizer: the frameworks' chat templating is not part of
the comparison (see docs/parity.md).

Driving a framework on the scenario (the parity trace tests do this): build the framework config
from `skyrl_overrides()` / `verl_overrides()`, check that the adapter maps it back onto
`core_config()`, then for each step take `canonical_rollouts(...)[step]`, let the framework
compute GRPO advantages and call the adapter as its trainer does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.dispatch import run
from arctic_rl_core.envs.bird import compute_score
from arctic_rl_core.envs.bird.dataset import load_split
from arctic_rl_core.envs.bird.sample import sample_dir

from arctic_rl_testbed.reference.fixed_rollouts import FORMAT

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.envs.bird.dataset import BirdSplit

TRACE_DIR_ENV = "ARCTIC_RL_PARITY_DIR"  # where the adapter suites write their traces
REQUIRE_TRACES_ENV = "ARCTIC_RL_PARITY_REQUIRE_TRACES"  # set by a full run: a missing trace fails
DEFAULT_TRACE_SUBDIR = ".test-results/parity"  # under the repository root
FRAMEWORKS: tuple[str, ...] = ("skyrl", "verl")


def wire_trace_name(framework: str) -> str:
    """The trace a framework's real trainer leaves over the wire (`serve --reference --parity-trace`),
    beside `<framework>.trace` (the in-process replay of its call order)."""
    return f"{framework}-wire.trace"


@dataclass(frozen=True)
class ParityScenario:
    """Everything that defines the canonical run. `question_indices[s]` are the BIRD train
    questions (by index in the bundled sample) of step `s`."""

    question_indices: tuple[tuple[int, ...], ...] = ((0, 1), (4, 0), (1, 4))
    rollouts_per_prompt: int = 2
    mini_batch_prompts: int = 1
    epochs: int = 2
    max_prompt_length: int = 64  # room for the chat template around the question over the wire
    max_response_length: int = 48
    seed: int = 7
    sampling_seed: int = 1234
    temperature: float = 1.0
    lr: float = 1e-3
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0
    kl_loss_coef: float = 0.05
    kl_loss_type: str = "k3"  # SkyRL's k3 == verl's low_var_kl formula; the name is valid in both
    entropy_coeff: float = 0.01
    reference_model: Mapping[str, int] = field(
        default_factory=lambda: {
            "num_layers": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        }
    )

    def __post_init__(self) -> None:
        sizes = {len(step) for step in self.question_indices}
        if len(sizes) != 1:
            raise ValueError(
                f"question_indices={self.question_indices}: every step needs the same number of prompts"
            )
        if self.steps < 3:
            raise ValueError(f"question_indices has {self.steps} steps: the parity suite needs at least 3")
        if self.prompts_per_step % self.mini_batch_prompts:
            raise ValueError(
                f"mini_batch_prompts={self.mini_batch_prompts} must divide the {self.prompts_per_step} "
                "prompts of a step"
            )
        if self.rollouts_per_prompt < 2:
            raise ValueError(f"rollouts_per_prompt={self.rollouts_per_prompt}: GRPO groups need at least 2")

    @property
    def steps(self) -> int:
        return len(self.question_indices)

    @property
    def prompts_per_step(self) -> int:
        return len(self.question_indices[0])

    # -- the core schema ------------------------------------------------------------------------
    def core_config(self) -> dict[str, Any]:
        """The scenario as `ArcticRLConfig.from_dict` input (only what the scenario fixes)."""
        return {
            "backend": {"kind": "reference", "reference": dict(self.reference_model)},
            "batch": {
                "prompts_per_step": self.prompts_per_step,
                "rollouts_per_prompt": self.rollouts_per_prompt,
                "mini_batch_prompts": self.mini_batch_prompts,
                "micro_batch_size_per_gpu": 1,
                "epochs": self.epochs,
                "max_prompt_length": self.max_prompt_length,
                "max_response_length": self.max_response_length,
            },
            "optimizer": {"lr": self.lr},
            "loss": {
                "loss_fn": "verl_grpo",
                "loss_agg_mode": "token-mean",
                "clip_ratio_low": self.clip_ratio_low,
                "clip_ratio_high": self.clip_ratio_high,
                "clip_ratio_c": self.clip_ratio_c,
                "use_kl_loss": True,
                "kl_loss_coef": self.kl_loss_coef,
                "kl_loss_type": self.kl_loss_type,
                "entropy_coeff": self.entropy_coeff,
                "temperature": self.temperature,
            },
            "determinism": {"seed": self.seed},
        }

    # -- framework renderings -------------------------------------------------------------------
    def skyrl_overrides(self) -> list[str]:
        """SkyRL 0.4.0 CLI overrides (the SkyRL adapter's `config.parse_cli`) for the same settings."""
        return [
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.enable_ray_prometheus_stats=false",
            "trainer.algorithm.advantage_estimator=grpo",
            "trainer.algorithm.policy_loss_type=dual_clip",
            "trainer.algorithm.loss_reduction=token_mean",
            f"trainer.algorithm.eps_clip_low={self.clip_ratio_low}",
            f"trainer.algorithm.eps_clip_high={self.clip_ratio_high}",
            f"trainer.algorithm.clip_ratio_c={self.clip_ratio_c}",
            "trainer.algorithm.use_kl_loss=true",
            f"trainer.algorithm.kl_loss_coef={self.kl_loss_coef}",
            f"trainer.algorithm.kl_estimator_type={self.kl_loss_type}",
            "trainer.algorithm.use_entropy_loss=true",
            f"trainer.algorithm.entropy_loss_coef={self.entropy_coeff}",
            f"trainer.policy.optimizer_config.lr={self.lr}",
            f"trainer.train_batch_size={self.prompts_per_step}",
            f"trainer.policy_mini_batch_size={self.mini_batch_prompts}",
            f"trainer.update_epochs_per_batch={self.epochs}",
            f"generator.n_samples_per_prompt={self.rollouts_per_prompt}",
            "trainer.micro_train_batch_size_per_gpu=1",
            # one old-log-prob forward per step, as verl does (SkyRL's default forwards per mini-batch)
            "trainer.recompute_old_logprobs_per_minibatch=false",
            f"trainer.max_prompt_length={self.max_prompt_length}",
            f"generator.sampling_params.max_generate_length={self.max_response_length}",
            f"generator.sampling_params.temperature={self.temperature}",
            f"trainer.seed={self.seed}",
            "trainer.arctic_rl.backend.kind=reference",
            *(f"trainer.arctic_rl.backend.reference.{k}={v}" for k, v in self.reference_model.items()),
        ]

    def verl_overrides(self) -> list[str]:
        """verl 0.9.1 Hydra overrides (before the verl adapter's `main.with_arctic_defaults`) for the same
        settings. Data files and the model path are the caller's (`data.*`, `actor_rollout_ref.model.path`)."""
        return [
            "algorithm.adv_estimator=grpo",
            "algorithm.norm_adv_by_std_in_grpo=true",
            f"data.train_batch_size={self.prompts_per_step}",
            f"data.max_prompt_length={self.max_prompt_length}",
            f"data.max_response_length={self.max_response_length}",
            "data.shuffle=false",
            f"actor_rollout_ref.rollout.n={self.rollouts_per_prompt}",
            f"actor_rollout_ref.rollout.temperature={self.temperature}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={self.mini_batch_prompts}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            f"actor_rollout_ref.actor.ppo_epochs={self.epochs}",
            "actor_rollout_ref.actor.shuffle=false",
            "actor_rollout_ref.actor.loss_agg_mode=token-mean",
            f"actor_rollout_ref.actor.clip_ratio_low={self.clip_ratio_low}",
            f"actor_rollout_ref.actor.clip_ratio_high={self.clip_ratio_high}",
            f"actor_rollout_ref.actor.clip_ratio_c={self.clip_ratio_c}",
            "actor_rollout_ref.actor.use_kl_loss=true",
            f"actor_rollout_ref.actor.kl_loss_coef={self.kl_loss_coef}",
            f"actor_rollout_ref.actor.kl_loss_type={self.kl_loss_type}",
            f"actor_rollout_ref.actor.entropy_coeff={self.entropy_coeff}",
            f"actor_rollout_ref.actor.optim.lr={self.lr}",
            "trainer.balance_batch=false",
            # one simulated GPU, verl's TP 2 default back to 1, the reference engine
            "trainer.n_gpus_per_node=1",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            # verl's token budget per GPU defaults to 16384; SkyRL has none (the core computes it)
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu="
            f"{self.max_prompt_length + self.rollouts_per_prompt * self.max_response_length}",
            "remote_backend.core.backend.kind=reference",
            f"data.seed={self.seed}",
            *(f"+remote_backend.core.backend.reference.{k}={v}" for k, v in self.reference_model.items()),
        ]


CANONICAL = ParityScenario()


# ----------------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutRow:
    """One trajectory of the scenario: token ids, the scorer's reward and its GRPO group."""

    group: int  # index of the prompt within its step (GRPO groups by it)
    question_index: int
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_text: str
    reward: float


def prompt_text(question: Any) -> str:
    """The user message of a BIRD question in the scenario (its text and evidence): the token ids of
    the in-process replays, the chat message the frameworks template over the wire."""
    return f"{question.question} ({question.evidence})"


def gold_response(sql: str) -> str:
    """A well-formatted answer holding `sql` (what the BIRD scorer rewards with 1.0)."""
    return f"<think>plan</think><answer>```sql\n{sql}\n```</answer>"


def canonical_rollouts(scenario: ParityScenario, backend: Backend) -> list[list[RolloutRow]]:
    """Rows of every step, grouped by prompt (`rollouts_per_prompt` consecutive rows a group).
    Sampled rollouts are drawn in ONE seeded `generate` call before any training, so they do not
    depend on when or how a framework would have asked for them."""

    tokenizer = backend.tokenizer  # the reference engine's
    data = load_split(sample_dir(), "train")
    by_index = {q.index: q for q in data.questions}
    missing = sorted({i for step in scenario.question_indices for i in step} - set(by_index))
    if missing:
        raise ValueError(
            f"question_indices {missing} are not in the bundled BIRD sample (0..{len(by_index) - 1})"
        )

    prompts: list[list[int]] = []
    for step in scenario.question_indices:
        for i in step:
            q = by_index[i]
            ids = tokenizer.encode(prompt_text(q), add_special_tokens=True)
            if len(ids) > scenario.max_prompt_length:
                raise ValueError(
                    f"question {i}: prompt of {len(ids)} tokens > max_prompt_length={scenario.max_prompt_length}"
                )
            prompts.append(ids)
    sampled_per_prompt = scenario.rollouts_per_prompt - 1
    requests = [p for p in prompts for _ in range(sampled_per_prompt)]
    params = SamplingParams(
        max_tokens=scenario.max_response_length, temperature=scenario.temperature, seed=scenario.sampling_seed
    )
    sampled = run(backend.generate(requests, params)).completions

    steps: list[list[RolloutRow]] = []
    cursor = 0
    for s, step in enumerate(scenario.question_indices):
        rows: list[RolloutRow] = []
        for group, i in enumerate(step):
            q = by_index[i]
            prompt = tuple(prompts[s * scenario.prompts_per_step + group])
            answer = tokenizer.encode(gold_response(q.sql), add_special_tokens=False)
            gold_ids = [*answer, tokenizer.eos_token_id]
            if len(gold_ids) > scenario.max_response_length:
                raise ValueError(
                    f"question {i}: gold answer of {len(gold_ids)} tokens > "
                    f"max_response_length={scenario.max_response_length}"
                )
            responses = [tuple(gold_ids)] + [
                tuple(c.token_ids) for c in sampled[cursor : cursor + sampled_per_prompt]
            ]
            cursor += sampled_per_prompt
            extra = {"db_path": str(data.databases[q.db_id].db_path)}
            for response in responses:
                text = tokenizer.decode(list(response), skip_special_tokens=True)
                reward = float(compute_score("bird", text, q.sql, extra)["score"])
                rows.append(RolloutRow(group, i, prompt, response, text, reward))
        steps.append(rows)
    return steps


def token_level_rewards(rows: Sequence[RolloutRow], width: int) -> list[list[float]]:
    """Outcome rewards on the last response token, zeros elsewhere, each row `width` long."""
    out = []
    for row in rows:
        values = [0.0] * width
        values[len(row.response_ids) - 1] = row.reward
        out.append(values)
    return out


def fixed_rollouts_document(
    scenario: ParityScenario, rollouts: Sequence[Sequence[RolloutRow]]
) -> dict[str, Any]:
    """The scenario's rollouts as a `serve --reference --fixed-rollouts` file (format
    `arctic_rl_testbed.reference.fixed_rollouts.FORMAT`): per question, keyed by its `prompt_text`, the
    responses of every step it appears in, in step and row order. The server hands them out in
    order of arrival, so over the wire a framework's step s gets the same responses as
    `rollouts[s]`; only which of a group's identical prompts gets which response may differ."""

    by_index = {q.index: q for q in load_split(sample_dir(), "train").questions}
    completions: dict[int, list[dict[str, list[int]]]] = {}
    for rows in rollouts:
        for row in rows:
            completions.setdefault(row.question_index, []).append({"token_ids": list(row.response_ids)})
    if len(rollouts) != scenario.steps:
        raise ValueError(f"{len(rollouts)} steps of rollouts for a scenario of {scenario.steps}")
    return {
        "format": FORMAT,
        "prompts": [
            {"contains": prompt_text(by_index[i]), "completions": completions[i]} for i in sorted(completions)
        ],
    }


def dataset_row(data: BirdSplit, question: Any) -> dict[str, Any]:
    """One question of a BIRD split in the verl/SkyRL dataset shape: the chat `prompt` (its
    `prompt_text`, short, as the CPU runs want), `data_source` "bird", `reward_model.ground_truth`
    (the gold SQL), `extra_info` (db_id, db_path, index), and SkyRL's `env_class`."""
    return {
        "data_source": "bird",
        "prompt": [{"role": "user", "content": prompt_text(question)}],
        "env_class": "bird",
        "reward_model": {"style": "rule", "ground_truth": question.sql},
        "extra_info": {
            "db_id": question.db_id,
            "db_path": str(data.databases[question.db_id].db_path),
            "index": question.index,
        },
    }


def dataset_rows(scenario: ParityScenario) -> list[dict[str, Any]]:
    """The scenario's prompts in step order, one `dataset_row` per prompt of every step (a question
    used in two steps is two rows). With no shuffling and `prompts_per_step` rows a batch, batch s
    holds step s."""

    data = load_split(sample_dir(), "train")
    by_index = {q.index: q for q in data.questions}
    return [dataset_row(data, by_index[i]) for step in scenario.question_indices for i in step]

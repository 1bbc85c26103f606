"""skyrl-gym environments over the core rewards: `bird` (alias `bird_sql`), `gsm8k_arctic` and
`bird_multi_turn`.

`register_environments()` is idempotent and runs when this module is imported, so any process that
unpickles the Arctic generator (it imports this module) has the environments, spawned Ray workers
included.

- `bird`, `gsm8k_arctic`: single turn, `step` scores the response and ends the episode. A scoring
  failure is reported in the step metadata (`scoring_error`) and in `get_metrics()` (counted by the
  generator as `generate/scoring_errors`), never a silent 0.
- `bird_multi_turn`: BIRD with SkyRL-SQL's protocol (`arctic_rl_core.envs.bird.multi_turn`): `<sql>`
  queries run read-only against the question's database and come back as observations until a
  `<solution>` or SkyRL's `generator.max_turns`; the reward is the final answer's execution match.

Row extras follow either convention: SkyRL's `reward_spec.ground_truth` or the core preprocessors'
verl-style `reward_model.ground_truth`, plus `extra_info` (BIRD: `db_path`) and `data_source`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arctic_rl_core.envs import bird, gsm8k
from arctic_rl_core.envs.bird.multi_turn import BirdSQLEpisode
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

BIRD_ENV_IDS = ("bird", "bird_sql")
GSM8K_ENV_ID = "gsm8k_arctic"
BIRD_MULTI_TURN_ENV_ID = "bird_multi_turn"


def ground_truth(extras: Mapping[str, Any], env_id: str) -> Any:
    for key in ("reward_spec", "reward_model"):
        spec = extras.get(key)
        if isinstance(spec, Mapping) and "ground_truth" in spec:
            return spec["ground_truth"]
    raise ValueError(
        f"{env_id} environment: row extras {sorted(extras)} have no reward_spec.ground_truth or "
        "reward_model.ground_truth; preprocess the data with `arctic-rl bird preprocess` or add it"
    )


class _CoreScoredEnv(BaseTextEnv):
    env_id = ""
    default_data_source = ""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        self.ground_truth = ground_truth(extras, self.env_id)
        self.extra_info = dict(extras.get("extra_info") or {})
        self.data_source = str(extras.get("data_source") or self.default_data_source)
        self.verdict: dict[str, Any] = {}

    def _score(self, action: str) -> dict[str, Any]:
        raise NotImplementedError

    def step(self, action: str) -> BaseTextEnvStepOutput:
        try:
            verdict = self._score(action)
        except Exception as exc:  # counted by the generator as a scoring error, reward reported as such
            self.verdict = {"scoring_error": f"{type(exc).__name__}: {exc}"}
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata=dict(self.verdict))
        metadata = {k: v for k, v in verdict.items() if k != "score"}
        if metadata.get("scoring_error") == "":
            del metadata["scoring_error"]
        self.verdict = metadata
        return BaseTextEnvStepOutput(
            observations=[], reward=float(verdict["score"]), done=True, metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """The episode's verdict as numbers (SkyRL averages them per env class): `scoring_error` 1/0,
        and each boolean verdict field (BIRD: `correct`, `format_correct`, `execution_success`)."""
        metrics: dict[str, Any] = {"scoring_error": float(bool(self.verdict.get("scoring_error")))}
        metrics.update({k: float(v) for k, v in self.verdict.items() if isinstance(v, bool)})
        return metrics


class BirdSQLEnv(_CoreScoredEnv):
    """BIRD text-to-SQL, scored by `arctic_rl_core.envs.bird.compute_score` (real SQL execution)."""

    env_id = "bird"
    default_data_source = "bird"

    def _score(self, action: str) -> dict[str, Any]:
        return dict(bird.compute_score(self.data_source, action, self.ground_truth, self.extra_info))


class GSM8KArcticEnv(_CoreScoredEnv):
    """GSM8K, scored by `arctic_rl_core.envs.gsm8k.compute_score`."""

    env_id = GSM8K_ENV_ID
    default_data_source = "gsm8k"

    def _score(self, action: str) -> dict[str, Any]:
        verdict = gsm8k.compute_score(self.data_source, action, self.ground_truth, self.extra_info)
        return dict(verdict) if isinstance(verdict, Mapping) else {"score": float(verdict)}


class BirdMultiTurnEnv(BaseTextEnv):
    """BIRD with SkyRL-SQL's protocol (`arctic_rl_core.envs.bird.multi_turn.BirdSQLEpisode`): SkyRL's
    `generator.max_turns` (passed in the extras) is the turn limit."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()

        self.episode = BirdSQLEpisode.from_row(dict(extras or {}), env_config)
        self.max_turns = self.episode.max_turns

    def step(self, action: str) -> BaseTextEnvStepOutput:
        step = self.episode.step(action)
        self.turns = self.episode.turns
        observations = [] if step.observation is None else [{"role": "user", "content": step.observation}]
        return BaseTextEnvStepOutput(
            observations=observations, reward=step.reward, done=step.done, metadata=step.info
        )

    def get_metrics(self) -> dict[str, Any]:
        return self.episode.metrics()


def register_environments() -> None:
    """Register the Arctic environments with skyrl-gym once per process (duplicates raise there)."""

    entries = {
        **dict.fromkeys(BIRD_ENV_IDS, BirdSQLEnv),
        GSM8K_ENV_ID: GSM8KArcticEnv,
        BIRD_MULTI_TURN_ENV_ID: BirdMultiTurnEnv,
    }
    for env_id, cls in entries.items():
        if env_id not in registry:
            register(id=env_id, entry_point=f"{cls.__module__}:{cls.__name__}")


register_environments()

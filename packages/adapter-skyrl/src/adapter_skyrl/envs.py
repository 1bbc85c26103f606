"""skyrl-gym environments over the core rewards: `bird` (alias `bird_sql`) and `gsm8k_arctic`.

`register_environments()` is idempotent and runs when this module is imported, so any process that
unpickles the Arctic generator (it imports this module) has the environments, spawned Ray workers
included. Single-turn: `step` scores the response and ends the episode. A scoring failure is
reported in the step metadata (`scoring_error`), counted by the generator, never a silent 0.

Row extras follow either convention: SkyRL's `reward_spec.ground_truth` or the core preprocessors'
verl-style `reward_model.ground_truth`, plus `extra_info` (BIRD: `db_path`) and `data_source`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

BIRD_ENV_IDS = ("bird", "bird_sql")
GSM8K_ENV_ID = "gsm8k_arctic"


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

    def _score(self, action: str) -> dict[str, Any]:
        raise NotImplementedError

    def step(self, action: str) -> BaseTextEnvStepOutput:
        try:
            verdict = self._score(action)
        except Exception as exc:  # counted by the generator as a scoring error, reward reported as such
            return BaseTextEnvStepOutput(
                observations=[],
                reward=0.0,
                done=True,
                metadata={"scoring_error": f"{type(exc).__name__}: {exc}"},
            )
        metadata = {k: v for k, v in verdict.items() if k != "score"}
        if metadata.get("scoring_error") == "":
            del metadata["scoring_error"]
        return BaseTextEnvStepOutput(
            observations=[], reward=float(verdict["score"]), done=True, metadata=metadata
        )


class BirdSQLEnv(_CoreScoredEnv):
    """BIRD text-to-SQL, scored by `arctic_rl_core.envs.bird.compute_score` (real SQL execution)."""

    env_id = "bird"
    default_data_source = "bird"

    def _score(self, action: str) -> dict[str, Any]:
        from arctic_rl_core.envs.bird import compute_score

        return dict(compute_score(self.data_source, action, self.ground_truth, self.extra_info))


class GSM8KArcticEnv(_CoreScoredEnv):
    """GSM8K, scored by `arctic_rl_core.envs.gsm8k.compute_score`."""

    env_id = GSM8K_ENV_ID
    default_data_source = "gsm8k"

    def _score(self, action: str) -> dict[str, Any]:
        from arctic_rl_core.envs.gsm8k import compute_score

        verdict = compute_score(self.data_source, action, self.ground_truth, self.extra_info)
        return dict(verdict) if isinstance(verdict, Mapping) else {"score": float(verdict)}


def register_environments() -> None:
    """Register the Arctic environments with skyrl-gym once per process (duplicates raise there)."""
    from skyrl_gym.envs.registration import register, registry

    entries = {**dict.fromkeys(BIRD_ENV_IDS, BirdSQLEnv), GSM8K_ENV_ID: GSM8KArcticEnv}
    for env_id, cls in entries.items():
        if env_id not in registry:
            register(id=env_id, entry_point=f"{cls.__module__}:{cls.__name__}")


register_environments()

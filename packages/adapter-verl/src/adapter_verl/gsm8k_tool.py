"""verl's GSM8K tool, for verl 0.9.1's `tool_agent` loop: `calc_gsm8k_reward(answer)` scores an answer
against the trajectory's ground truth with the core GSM8K reward (`arctic_rl_core.envs.gsm8k`).

verl 0.9.1 no longer ships the GSM8K tool of its multi-turn examples (`verl.tools.gsm8k_tool`, in
earlier releases); this is a tool of the same shape, so that their data and tool configs run on the
Arctic path: the name `calc_gsm8k_reward`, one string argument `answer`, the ground truth from the
row's `extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth`, the response text
`Current parsed answer='<answer>' reward=<score>`, and a step reward of 0 for an answer that scores
higher than the trajectory's previous one, -0.05 otherwise. Select it with
`actor_rollout_ref.rollout.multi_turn.tool_config_path=adapter_verl/tool_configs/gsm8k_tool_config.yaml`
(verl resolves a relative path against its installation's site-packages, where an installed adapter-verl
is) or the absolute path, `TOOL_CONFIG_FILE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from arctic_rl_core.envs.gsm8k import ANSWER_MARKER, compute_score
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

TOOL_NAME = "calc_gsm8k_reward"
TOOL_CONFIG_FILE = Path(__file__).with_name("tool_configs") / "gsm8k_tool_config.yaml"
NO_IMPROVEMENT_PENALTY = -0.05


@dataclass
class _Trajectory:
    ground_truth: str
    best: float = 0.0


class Gsm8kTool(BaseTool):
    """One instance per tool config; one `_Trajectory` per `create` (a trajectory's tool calls)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        super().__init__(config, tool_schema)
        self._trajectories: dict[str, _Trajectory] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        create_kwargs = kwargs.get("create_kwargs") or {}
        ground_truth = kwargs.get("ground_truth", create_kwargs.get("ground_truth"))
        if ground_truth is None:
            raise ValueError(
                f"{TOOL_NAME}: no ground truth for this trajectory: give each row "
                f"extra_info.tools_kwargs.{TOOL_NAME}.create_kwargs.ground_truth"
            )
        instance_id = instance_id or uuid4().hex
        self._trajectories[instance_id] = _Trajectory(str(ground_truth))
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        answer = str(parameters.get("answer", ""))
        trajectory = self._trajectories[instance_id]
        reward = score_answer(answer, trajectory.ground_truth)
        step_reward = 0.0 if reward > trajectory.best else NO_IMPROVEMENT_PENALTY
        trajectory.best = max(trajectory.best, reward)
        return ToolResponse(text=f"Current parsed answer={answer!r} reward={reward}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return self._trajectories[instance_id].best

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._trajectories.pop(instance_id, None)


def score_answer(answer: str, ground_truth: str) -> float:
    """The core GSM8K reward of `#### <answer>` (an answer given with its marker is kept as is)."""

    text = answer if answer.lstrip().startswith(ANSWER_MARKER) else f"{ANSWER_MARKER} {answer}"
    return float(compute_score("openai/gsm8k", text, ground_truth)["score"])

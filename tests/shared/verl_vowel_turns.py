"""verl's `vowel_turns` agent loop: the verl form of SkyRL's `vowel_turns` environment
(tests/shared/skyrl_multi_turn.py), for the verl multi-turn learning run (test_verl_multi_turn_learns).

Each trajectory samples `multi_turn.max_assistant_turns` turns of at most `TURN_TOKENS` tokens through
verl's server manager (on the Arctic path: the arctic rollout replica), one request id per trajectory.
After every turn but the last, verl's continuous-token builder appends the user message `SAY_MORE`
(mask 0), as verl's tool agent appends a tool's answer. Each turn earns `learnable_reward.turn_reward`
(its vowel share / the turn limit; verl's `turn_scores`), and the trajectory's reward score is their sum.

Select it with `agent.agent_loop_config_path=<write_agent_loop_config(...)>` and
`agent.default_agent_loop=vowel_turns` (or the rows' `agent_name`). verl's agent-loop worker imports this
module by name in its Ray process: the run puts tests/shared on PYTHONPATH.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

from learnable_reward import PROMPTS, SAY_MORE, turn_reward
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.utils.profiler import simple_timer

AGENT_NAME = "vowel_turns"
TURN_TOKENS = 8  # each turn's max_tokens (SkyRL's run: generator.sampling_params.max_generate_length=8)


class VowelTurnsAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_turns = int(self.rollout_config.multi_turn.max_assistant_turns or 0)
        if self.max_turns < 1:
            raise ValueError(
                f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={self.max_turns}: the {AGENT_NAME} "
                "agent loop runs that many turns; set it to 1 or more"
            )
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        tokens = await self.ct_build_initial_tokens(messages)
        prompt_length = len(tokens)
        params = {**sampling_params, "max_tokens": TURN_TOKENS}
        request_id = uuid4().hex
        mask: list[int] = []
        logprobs: list[float] | None = []
        scores: list[float] = []
        metrics: dict[str, Any] = {}
        extra_fields: dict[str, Any] = {}  # the first turn's (its weights version), then the latest maximum
        while len(scores) < self.max_turns and len(mask) < self.response_length:
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=tokens, sampling_params=dict(params)
                )
            if not extra_fields:
                extra_fields.update(out.extra_fields)
            elif out.extra_fields.get("max_global_steps"):
                extra_fields["max_global_steps"] = out.extra_fields["max_global_steps"]
            if out.log_probs is None:
                logprobs = None
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                tokens, list(out.token_ids), mask, logprobs, assistant_logprobs=out.log_probs
            )
            tokens = merged.token_ids
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            scores.append(turn_reward(text, self.max_turns))
            if len(scores) == self.max_turns:
                break
            messages.append({"role": "assistant", "content": text})
            previous = list(messages)
            messages.append({"role": "user", "content": SAY_MORE})
            merged, mask, logprobs = await self.ct_merge_context_msg(
                previous, messages, tokens, mask, logprobs
            )
            tokens = merged.token_ids
        response = tokens[prompt_length:]
        cut = self.response_length
        return AgentLoopOutput(
            prompt_ids=tokens[:prompt_length],
            response_ids=response[:cut],
            response_mask=mask[:cut],
            response_logprobs=None if logprobs is None else logprobs[:cut],
            reward_score=sum(scores),
            num_turns=2 * len(scores),  # verl's count: user + assistant turns + 1
            metrics=metrics,
            extra_fields={**extra_fields, "turn_scores": scores, "tool_rewards": []},
        )


def vowel_turns_rows() -> list[dict[str, Any]]:
    """verl dataset rows of the graded prompts (tests/shared/learnable_reward.py) for the loop."""
    return [
        {
            "data_source": AGENT_NAME,
            "agent_name": AGENT_NAME,
            "prompt": [{"role": "user", "content": prompt}],
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": i},
        }
        for i, prompt in enumerate(PROMPTS)
    ]


def write_agent_loop_config(path: Path) -> Path:
    """verl's registry of custom agent loops (`agent.agent_loop_config_path`) naming this loop."""
    path.write_text(f"- name: {AGENT_NAME}\n  _target_: {__name__}.{VowelTurnsAgentLoop.__name__}\n")
    return path

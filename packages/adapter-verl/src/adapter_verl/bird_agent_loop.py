"""verl agent loop `bird_sql_agent`: BIRD multi-turn with SkyRL-SQL's protocol
(`arctic_rl_core.envs.bird.multi_turn.BirdSQLEpisode`) on verl's agent-loop machinery.

Each turn samples through verl's server manager (on the Arctic path: the arctic rollout replica, token
in / token out) with SkyRL-SQL's stop strings (`</sql>`, `</solution>`); the episode runs the turn's
`<sql>` read-only against the question's database and its observation's tokens are appended (mask 0),
in one assistant message as SkyRL-SQL trains (a turn's final EOS, if the model emitted one before the
episode ended, is left out of the row: the next turn continues the message). The episode ends at
`<solution>`, after `max_turns` actions (`actor_rollout_ref.rollout.multi_turn.max_assistant_turns`,
required: the N of the rows' `arctic-rl bird preprocess --max-turns N`, which their prompt states) or
when the response reaches `rollout.response_length`; its reward (1 correct, 0 wrong, -1 malformed, on
the final answer's execution) is the trajectory's reward score, and its counts (turns, sql_calls,
well_formed, correct; `acc` = correct) go to verl's reward extra info. The weights version of the turns
travels in the row's extra fields as verl's tool agent carries it (the first turn's, the last turn's as
`max_global_steps`). An episode whose step raises is logged with its request id and ends there, its row
kept untrained (mask 0, reward 0, `env_error` 1 in the reward extra info), so the rest of the batch
trains (as SkyRL's generator keeps a raising environment's row).

Select it with `actor_rollout_ref.rollout.agent.agent_loop_config_path=<AGENT_LOOP_CONFIG_FILE>` (verl's
registry of custom agent loops) and `agent.default_agent_loop=bird_sql_agent` (or the rows'
`agent_name`); the rows are `arctic-rl bird preprocess --max-turns N`'s.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any
from uuid import uuid4

from arctic_rl_core.envs.bird.multi_turn import STOP_STRINGS, BirdSQLEpisode
from arctic_rl_core.multi_turn.prompt_text import PromptText
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

logger = logging.getLogger(__name__)

AGENT_NAME = "bird_sql_agent"
AGENT_LOOP_CONFIG_FILE = Path(__file__).with_name("agent_loops.yaml")


@register(AGENT_NAME)
class BirdSQLAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        max_turns = self.rollout_config.multi_turn.max_assistant_turns
        if not max_turns:
            raise ValueError(
                f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_turns!r}: the {AGENT_NAME} agent "
                "loop needs the episode's turn limit; set it to the N of `arctic-rl bird preprocess --max-turns N` "
                "(the turns the rows' prompt promises the model)"
            )
        self.max_turns = int(max_turns)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        loop = asyncio.get_running_loop()
        row = {key: kwargs.get(key) for key in ("reward_model", "extra_info") if kwargs.get(key) is not None}
        episode = BirdSQLEpisode.from_row(row, max_turns=self.max_turns)
        text = PromptText(self.tokenizer)
        eos = self.tokenizer.eos_token_id
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        params = {**sampling_params, "stop": list(STOP_STRINGS)}
        request_id = uuid4().hex
        response_ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        with_logprobs = True
        metrics: dict[str, Any] = {}
        extra_fields: dict[str, Any] = {}  # the first turn's (its weights version), then the latest maximum
        step = None  # the episode's last step
        sampled = observations = 0
        env_error = False
        while len(response_ids) < self.response_length:
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=prompt_ids + response_ids, sampling_params=dict(params)
                )
            ids = [int(t) for t in out.token_ids]
            sampled += 1
            if not extra_fields:
                extra_fields.update(out.extra_fields)
            elif out.extra_fields.get("max_global_steps"):
                extra_fields["max_global_steps"] = out.extra_fields["max_global_steps"]
            with_logprobs = with_logprobs and out.log_probs is not None
            try:
                with simple_timer("tool_calls", metrics):
                    step = await loop.run_in_executor(
                        None, episode.step, text.response_text(ids, STOP_STRINGS)
                    )
            except Exception:
                logger.exception(
                    "%s: the episode of request %s raised at turn %d; its row is kept untrained (mask 0, reward 0)",
                    AGENT_NAME,
                    request_id,
                    sampled,
                )
                env_error, step = True, None
            if step is not None and not step.done and ids and ids[-1] == eos:  # the message goes on
                ids = ids[:-1]
            response_ids += ids
            mask += [1] * len(ids)
            if with_logprobs:
                logprobs += [float(x) for x in out.log_probs[: len(ids)]]
            if step is None or step.done:
                break
            observation = self.tokenizer.encode(step.observation, add_special_tokens=False)
            observations += 1
            response_ids += observation
            mask += [0] * len(observation)
            logprobs += [0.0] * len(observation)
        reward = 0.0 if step is None else float(step.reward)  # a raising episode: 0, and nothing trained
        if env_error:
            mask = [0] * len(mask)
        counts = episode.metrics()
        cut = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:cut],
            response_mask=mask[:cut],
            response_logprobs=logprobs[:cut] if with_logprobs else None,
            reward_score=reward,
            num_turns=int(counts["turns"]) + observations + 1,  # verl's count: user + assistant + 1
            metrics=metrics,
            extra_fields={
                **extra_fields,
                "turn_scores": [],
                "tool_rewards": [],
                "reward_extra_info": {"acc": counts["correct"], **counts, "env_error": float(env_error)},
            },
        )

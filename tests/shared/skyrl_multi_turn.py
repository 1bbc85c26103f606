"""Multi-turn SkyRL test helpers (the SkyRL suite only: imports SkyRL): dataset rows of the three
multi-turn environments, a scripted policy over the reference engine, and SkyRL's own generator
replaying recorded turns on a vLLM-free engine (the stand-in the Arctic generator is compared with).

- Rows: SkyRL's `gsm8k_multi_turn` (turn-level rewards) on the bundled GSM8K sample; the Arctic
  `bird_multi_turn` (core preprocessing with `max_turns`, tests/shared/bird_multi_turn_rows.py);
  SkyRL's own `text2sql` (SkyRL-SQL's data layout: `db_id` + `data`, the databases under
  `environment.skyrl_gym.text2sql.db_path`).
- `ScriptedPolicy`: the reference engine answering each prompt with the text a script gives for the
  conversation so far (its canonical token ids, with the log-probs the engine's sampler gives those
  tokens): multi-turn behaviour (a query, an early solution, a run to the turn limit) on demand.
- `ReplayEngine` / `skyrl_replay`: SkyRL's `SkyRLGymGenerator` with an engine that hands each
  trajectory the turns the Arctic run recorded, checking that SkyRL asks with the same prompt ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.backends.protocol import Completion, FinishReason, GenerateOutput
from bird_multi_turn_rows import bird_multi_turn_rows
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface

__all__ = ["bird_multi_turn_rows"]  # the SkyRL tests' rows of the bundled BIRD sample (shared with verl's)

SQL_STOP = ["</sql>", "</solution>"]


# -- rows ----------------------------------------------------------------------------------------
def gsm8k_multi_turn_rows(count: int) -> list[dict[str, Any]]:
    """SkyRL's `gsm8k_multi_turn` rows (reward_spec.ground_truth) from the bundled GSM8K sample."""
    from arctic_rl_core.envs.gsm8k import build_rows, sample_problems

    rows = []
    for row in build_rows(sample_problems()[:count], "train"):
        rows.append(
            {
                "prompt": row["prompt"],
                "env_class": "gsm8k_multi_turn",
                "reward_spec": {"method": "rule", "ground_truth": row["reward_model"]["ground_truth"]},
                "extra_info": {"index": row["extra_info"]["index"]},
            }
        )
    return rows


def skyrl_sql_layout(root: Path) -> Path:
    """A SkyRL-SQL database root (`<root>/bird/train/train_databases/<db_id>/<db_id>.sqlite`) over the
    bundled sample; returns `root` (what `environment.skyrl_gym.text2sql.db_path` names)."""
    from arctic_rl_core.envs.bird.sample import sample_dir

    (root / "bird").mkdir(parents=True, exist_ok=True)
    link = root / "bird" / "train"
    if not link.exists():
        os.symlink(sample_dir() / "train", link)
    return root


def text2sql_rows(bird_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same questions as SkyRL-SQL's data has them (env `text2sql`: `db_id`, `data`, `reward_spec`)."""
    return [
        {
            "prompt": row["prompt"],
            "env_class": "text2sql",
            "db_id": row["extra_info"]["db_id"],
            "data": "bird",
            "reward_spec": {"method": "rule", "ground_truth": row["reward_model"]["ground_truth"]},
        }
        for row in bird_rows
    ]


def write_jsonl(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- a scripted policy over the reference engine ------------------------------------------------------
Script = Callable[[str], str]  # the conversation so far (decoded prompt) -> the next response's text


class ScriptedPolicy(ForwardingBackend):
    """The reference engine, answering each prompt with `script(its text)`: the text's token ids (plus
    EOS unless it ends with a stop string), and the log-probs the engine's sampler gives those tokens
    after the prompt (`score_completions`, teacher-forced). Everything else is the engine's."""

    def __init__(self, engine: Any, script: Script, *, spell: str | None = None):
        """`spell`: a word written one character per token wherever a response holds it (ids the
        tokenizer never makes of that text: what a model may sample)."""
        super().__init__(engine)
        self.script = script
        self.tokenizer = engine.tokenizer
        self.spell = spell

    def _encode(self, text: str) -> list[int]:
        if not self.spell or self.spell not in text:
            return self.tokenizer.encode(text, add_special_tokens=False)
        head, tail = text.split(self.spell, 1)
        letters = [self.tokenizer.convert_tokens_to_ids(c) for c in self.spell]
        return [*self.tokenizer.encode(head, add_special_tokens=False), *letters, *self._encode(tail)]

    async def generate(self, prompts, params):
        completions_ids, finishes, prompt_ids = [], [], []
        for prompt in prompts:
            ids = list(prompt) if not isinstance(prompt, str) else self.tokenizer.encode(prompt)
            prompt_ids.append(ids)
            text = self.script(self.tokenizer.decode(ids, skip_special_tokens=False))
            tokens = self._encode(text)
            if not any(text.endswith(s) for s in params.stop):
                tokens.append(int(self.tokenizer.eos_token_id))
            completions_ids.append(tokens[: params.max_tokens])
            finishes.append(FinishReason.STOP if len(tokens) <= params.max_tokens else FinishReason.LENGTH)
        scored = await self.target.score_completions(prompt_ids, completions_ids, params)
        version = (await self.target.state()).weights_version
        completions = [
            Completion(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                token_ids=tuple(tokens),
                finish_reason=finish,
                prompt_len=len(ids),
                generation_len=len(tokens),
                prompt_token_ids=tuple(ids),
                logprobs=tuple(lp for lp, _ in entries) if params.logprobs else None,
            )
            for ids, tokens, finish, entries in zip(
                prompt_ids, completions_ids, finishes, scored, strict=True
            )
        ]
        return GenerateOutput(completions=completions, weights_version=version)


class TextOnly(ForwardingBackend):
    """A backend as the on-prem server answers: text prompts only, no prompt ids echoed (only
    `prompt_len`)."""

    @property
    def accepts_token_ids(self) -> bool:
        return False

    async def generate(self, prompts, params):
        assert all(isinstance(p, str) for p in prompts)
        out = await self.target.generate(prompts, params)
        completions = [dataclasses.replace(c, prompt_token_ids=None) for c in out.completions]
        return dataclasses.replace(out, completions=completions)


# -- SkyRL's own generator, replaying recorded turns ---------------------------------------------------
class ReplayEngine(InferenceEngineInterface):
    """Hands each session (trajectory) the turns recorded for it, in order, after checking that SkyRL
    asks with the prompt ids the recorded turn was asked with."""

    def __init__(self, turns_by_session: dict[str, list[Any]]):
        self.turns = {key: list(turns) for key, turns in turns_by_session.items()}

    @property
    def model_name(self) -> str:
        return "replay"

    async def generate(self, input_batch, model=None):
        (session,) = input_batch["session_ids"]
        (prompt,) = input_batch["prompt_token_ids"]
        turn = self.turns[session].pop(0)
        assert tuple(prompt) == turn.prompt_ids, f"session {session}: SkyRL asked with other prompt ids"
        want_logprobs = (input_batch.get("sampling_params") or {}).get("logprobs") is not None
        return {
            "responses": [turn.text],
            "response_ids": [list(turn.token_ids)],
            "stop_reasons": [str(turn.finish_reason)],
            "response_logprobs": [list(turn.logprobs)] if want_logprobs else None,
            "prompt_logprobs": None,
            "rollout_expert_indices": None,
            "rollout_sample_support": None,
        }

    async def finish_session(self, session_id):
        pass

    def get_endpoint_url(self):
        raise NotImplementedError

    async def chat_completion(self, request_payload):
        raise NotImplementedError

    async def render_chat_completion(self, request_payload):
        raise NotImplementedError

    async def completion(self, request_payload):
        raise NotImplementedError

    async def wake_up(self, *args, **kwargs):
        raise NotImplementedError

    async def sleep(self, *args, **kwargs):
        raise NotImplementedError

    async def update_named_weights(self, request):
        raise NotImplementedError

    async def load_lora_adapter(self, lora_name, lora_path):
        raise NotImplementedError

    async def teardown(self):
        pass

    async def reset_prefix_cache(self, reset_running_requests=False):
        raise NotImplementedError

    async def pause_generation(self):
        raise NotImplementedError

    async def resume_generation(self):
        raise NotImplementedError

    async def get_world_size(self):
        raise NotImplementedError


def skyrl_replay(
    cfg: Any, tokenizer: Any, input_batch: dict[str, Any], reports: Sequence[Any]
) -> dict[str, Any]:
    """SkyRL's own `SkyRLGymGenerator` on `input_batch` (with trajectory ids), every trajectory given the
    turns the Arctic generator recorded for it (`reports`, in input order)."""
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator

    sessions = {
        f"{t.instance_id}_{t.repetition_id}": report.turns
        for t, report in zip(input_batch["trajectory_ids"], reports, strict=True)
    }
    generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, ReplayEngine(sessions), tokenizer)
    fresh = dict(input_batch, env_extras=[dict(e) for e in input_batch["env_extras"]])
    return asyncio.run(generator.generate(fresh, disable_tqdm=True))


def generator_input(rows: Sequence[dict[str, Any]], cfg: Any, n: int = 1) -> dict[str, Any]:
    """SkyRL's own generator input for `rows` (its `prepare_generator_input`, training phase)."""
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
    from skyrl.train.generators.utils import prepare_generator_input

    prompts = [
        {
            "prompt": r["prompt"],
            "env_class": r["env_class"],
            "env_extras": {k: v for k, v in r.items() if k not in ("prompt", "env_class")},
            "uid": f"row{i}",
        }
        for i, r in enumerate(rows)
    ]
    params = get_sampling_params_for_backend("vllm", cfg.generator.sampling_params)
    batch, _ = prepare_generator_input(prompts, n, params, cfg.environment.env_class, "train", 0)
    return batch


def row_without_replay_fields(output: dict[str, Any]) -> dict[str, Any]:
    """The fields of a GeneratorOutput that SkyRL's generator and the Arctic one must agree on."""
    keys = ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs")
    return {k: output[k] for k in keys}


def drop_prompt_repair(arctic: dict[str, Any], reports: Sequence[Any]) -> dict[str, Any]:
    """`arctic`'s rows with each repaired prompt put back to what SkyRL built (what a replay shows)."""
    rows = dict(arctic)
    rows["prompt_token_ids"] = [
        list(report.turns[0].prompt_ids) if report.prompt_repaired else list(prompt)
        for prompt, report in zip(arctic["prompt_token_ids"], reports, strict=True)
    ]
    return rows


# -- a multi-turn reward the tiny model can learn -------------------------------------------------------
VOWEL_TURNS_ENV_ID = "vowel_turns"


def register_vowel_turns_env() -> None:
    """`vowel_turns`: every action is answered `SAY_MORE` ("Say more.") until SkyRL's max_turns; each turn's
    reward is `learnable_reward.turn_reward` (turn-level rewards: a trajectory's total is its mean vowel
    share)."""
    from learnable_reward import SAY_MORE, turn_reward
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry

    class VowelTurnsEnv(BaseTextEnv):
        def __init__(self, env_config: Any = None, extras: Any = None):
            super().__init__()
            self.max_turns = int((extras or {}).get("max_turns", 2))

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            done = self.turns >= self.max_turns
            observations = [] if done else [{"role": "user", "content": SAY_MORE}]
            reward = turn_reward(action, self.max_turns)
            return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done, metadata={})

        def get_metrics(self) -> dict[str, Any]:
            return {"turns": float(self.turns)}

    if VOWEL_TURNS_ENV_ID not in registry:
        register(id=VOWEL_TURNS_ENV_ID, entry_point=VowelTurnsEnv)


def vowel_turns_rows() -> list[dict[str, Any]]:
    from learnable_reward import PROMPTS

    register_vowel_turns_env()
    return [
        {
            "prompt": [{"role": "user", "content": p}],
            "env_class": VOWEL_TURNS_ENV_ID,
            "extra_info": {"index": i},
        }
        for i, p in enumerate(PROMPTS)
    ]

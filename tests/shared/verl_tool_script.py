"""Scripted tool-using conversations for verl's `tool_agent` loop on the Arctic path (test_verl_tool_agent,
test_verl_tool_agent_wire): four GSM8K-shaped questions, each with the assistant turns the server serves
(`arctic-rl serve --reference --fixed-rollouts`, as token ids of the tiny model's tokenizer) and what verl's
loop must make of them:

- `tool_then_answer`: calls verl's GSM8K tool (`calc_gsm8k_reward`, adapter_verl.gsm8k_tool) with the right
  answer, then answers `#### 72`: two assistant turns, reward 1;
- `answers_at_once`: answers in its first turn, no tool call: the trajectory ends early (one turn), reward 1;
- `hits_max_turns`: calls the tool with a wrong answer every turn: stopped by
  `multi_turn.max_assistant_turns=3` (its third call is never executed), no `####` answer: reward 0;
- `tool_raises`: calls the function tool `lookup` (verl_lookup_tool.py, `function_tool_path`) with the key
  that makes it raise: verl's loop answers the error as the tool's response, the model then answers, reward 1.

The system prompt and the rows are those of verl's GSM8K tool-agent data (`extra_info.tools_kwargs`
carries the tool's ground truth)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_ASSISTANT_TURNS = 3
LOOKUP_TOOL_FILE = Path(__file__).with_name("verl_lookup_tool.py")
SYSTEM = (
    "You are a math expert. Use the calc_gsm8k_reward tool after solving the question, then put your "
    "final answer in the format of `#### <answer>`."
)


def tool_call(name: str, **arguments: str) -> str:
    """An assistant's tool call in verl's `hermes` format."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@dataclass(frozen=True)
class Scenario:
    name: str
    question: str
    ground_truth: str
    turns: tuple[str, ...]  # the text of each assistant turn the server serves (each then ends with EOS)
    assistant_turns: int  # how many of them verl's loop asks for
    reward: float  # verl's GSM8K reward of the final response
    tool_texts: tuple[str, ...] = ()  # what each executed tool call answers (a substring)

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.question}]

    def row(self, index: int) -> dict[str, Any]:
        """The row of verl's GSM8K tool-agent data."""
        return {
            "data_source": "openai/gsm8k",
            "agent_name": "tool_agent",
            "prompt": self.messages,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": self.ground_truth},
            "extra_info": {
                "split": "train",
                "index": index,
                "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": self.ground_truth}}},
            },
        }


SCENARIOS = (
    Scenario(
        "tool_then_answer",
        "Tom has 3 bags with 24 apples in each bag. How many apples does Tom have?",
        "72",
        (tool_call("calc_gsm8k_reward", answer="72"), "3 x 24 = 72. #### 72"),
        assistant_turns=2,
        reward=1.0,
        tool_texts=("Current parsed answer='72' reward=1.0",),
    ),
    Scenario(
        "answers_at_once", "What is 2 plus 3?", "5", ("2 + 3 = 5. #### 5",), assistant_turns=1, reward=1.0
    ),
    Scenario(
        "hits_max_turns",
        "What is 7 times 8?",
        "56",
        tuple(tool_call("calc_gsm8k_reward", answer=a) for a in ("54", "55", "57")),
        assistant_turns=MAX_ASSISTANT_TURNS,
        reward=0.0,
        tool_texts=("Current parsed answer='54' reward=0.0", "Current parsed answer='55' reward=0.0"),
    ),
    Scenario(
        "tool_raises",
        "How many legs do 2 spiders have?",
        "16",
        (tool_call("lookup", key="boom"), "Each spider has 8 legs. #### 16"),
        assistant_turns=2,
        reward=1.0,
        tool_texts=("Error executing tool 'lookup': the lookup service is down",),
    ),
)


def turn_ids(tokenizer: Any, text: str) -> list[int]:
    """An assistant turn as the model emits it: the text's tokens, then EOS (`<|im_end|>`)."""
    return [*tokenizer.encode(text, add_special_tokens=False), int(tokenizer.eos_token_id)]


def fixed_rollouts(tokenizer: Any, *, repeats: int = 1) -> dict[str, Any]:
    """The `--fixed-rollouts` document: each question's turns, in order, `repeats` times (once per
    trajectory of that question the server will see)."""
    return {
        "format": "arctic-rl-fixed-rollouts/1",
        "prompts": [
            {
                "contains": s.question,
                "completions": [{"token_ids": turn_ids(tokenizer, t)} for t in s.turns[: s.assistant_turns]]
                * repeats,
            }
            for s in SCENARIOS
        ],
    }


def write_tool_config(path: Path) -> Path:
    """verl's tool config (verl.tools.tool_registry format) naming the adapter's GSM8K tool."""
    from adapter_verl.gsm8k_tool import TOOL_CONFIG_FILE

    path.write_text(TOOL_CONFIG_FILE.read_text())
    return path


def sampled_turns(response_ids: list[int], response_mask: list[int]) -> list[list[int]]:
    """The runs of mask-1 tokens of a verl response: the tokens each assistant turn sampled."""
    turns: list[list[int]] = []
    previous = 0
    for token, mask in zip(response_ids, response_mask, strict=True):
        if mask and not previous:
            turns.append([])
        if mask:
            turns[-1].append(int(token))
        previous = mask
    return turns

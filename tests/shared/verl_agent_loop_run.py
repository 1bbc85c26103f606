"""verl 0.9.1's own agent-loop worker (`AgentLoopWorker.generate_sequences`) run in process, no Ray, as
its Ray actor would run it: over the adapter's Arctic rollout server (`ArcticRolloutServer`, what each
replica's Ray actor runs) with `ArcticBackend` and the real arctic-platform 0.1.4 client against
`arctic-rl serve --reference --fixed-rollouts`, and over a vLLM-free stand-in that answers the same
scripted turns (test_verl_tool_agent, test_verl_bird_agent_loop).

- `agent_loop_config(model_dir, *overrides)`: verl's config for the arctic rollout with multi-turn on
  (`PROMPT_LENGTH`, `RESPONSE_LENGTH`).
- `fixed_rollouts_server(root, document)`: the server answering with the scripted turns.
- `run_agent_loops(...)`: both runs of the same rows, the server's record of the Arctic run's requests
  and the replica's queue stats (`AgentLoopRuns`).
- `unpadded_row(output, i)`: a row's prompt ids, response ids, response mask and rollout log-probs.
- `assert_rollout_log_probs_are_the_models(output, model_dir)`: the sampler's log-prob on every sampled
  token, 0 on the others.
- `turn_digests(output)` / `served_digests(requests)`: each sampled turn as the server's record would
  hold it had the sampler read verl's ids exactly, and what the record holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 256


def agent_loop_config(model_dir: Path, *overrides: str) -> Any:
    """verl's composed config for its agent-loop worker on the arctic rollout, multi-turn on."""
    from adapter_verl.main import compose

    return compose(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=arctic",
            f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}",
            *overrides,
        ]
    )


@contextlib.contextmanager
def fixed_rollouts_server(root: Path, document: Mapping[str, Any]) -> Iterator[Any]:
    """`arctic-rl serve --reference --fixed-rollouts` serving `document` (format
    arctic-rl-fixed-rollouts/1), its requests logged (`WireServer.requests`)."""
    from wire_server import serve_reference

    fixed = root / "fixed.json"
    fixed.write_text(json.dumps(document))
    args = ["--fixed-rollouts", str(fixed), "--request-log", str(root / "requests.jsonl")]
    with serve_reference(root / "server", args=args) as running:
        yield running


def agent_loop_batch(rows: Sequence[Mapping[str, Any]]) -> Any:
    """verl's batch for its agent-loop worker from dataset rows (what its dataloader hands it)."""
    from verl import DataProto

    columns: dict[str, list[Any]] = {
        "raw_prompt": [r["prompt"] for r in rows],
        "data_source": [r["data_source"] for r in rows],
        "reward_model": [r["reward_model"] for r in rows],
        "extra_info": [r["extra_info"] for r in rows],
        "index": [r["extra_info"]["index"] for r in rows],
    }
    if any("agent_name" in r for r in rows):
        columns["agent_name"] = [r["agent_name"] for r in rows]
    if any("tools_kwargs" in r["extra_info"] for r in rows):
        columns["tools_kwargs"] = [r["extra_info"].get("tools_kwargs", {}) for r in rows]
    non_tensor = {}
    for key, values in columns.items():
        array = np.empty(len(values), dtype=object)
        array[:] = values
        non_tensor[key] = array
    return DataProto.from_dict(non_tensors=non_tensor)


class ScriptedStandIn:
    """A vLLM-free server for verl's agent loop: answers each request with the next scripted turn (token
    ids) of the question its prompt holds (no sampler, no Arctic)."""

    def __init__(self, tokenizer: Any, turns: Mapping[str, Sequence[Sequence[int]]]) -> None:
        self.tokenizer = tokenizer
        self.turns = turns
        self.served: dict[str, int] = {}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        text = self.tokenizer.decode(prompt_ids)
        (question,) = [q for q in self.turns if q in text]
        turn = self.served.get(question, 0)
        self.served[question] = turn + 1
        return TokenOutput(token_ids=list(self.turns[question][turn]), log_probs=None)


class ReplicaClient:
    """What verl's LLM-server client does for the agent loop, minus Ray: the replica server's generate."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def generate(self, request_id: str, **kwargs: Any):
        return await self.server.generate(request_id, **kwargs)


@dataclass
class AgentLoopRuns:
    arctic: Any  # verl's DataProto from the Arctic path
    stand_in: Any  # the same from the stand-in
    requests: list[dict[str, Any]]  # the server's record of the Arctic run's requests
    queue: Any  # the replica's SamplerQueueStats
    trace_dir: Path  # the replica's trace (adapter_verl.trace: one `generate` record per turn)


def run_agent_loops(
    config: Any,
    rows: Sequence[Mapping[str, Any]],
    stand_in: ScriptedStandIn,
    *,
    server: Any,
    model_dir: Path,
    root: Path,
) -> AgentLoopRuns:
    """verl's agent-loop worker over the rows, once through the Arctic replica (ArcticBackend, the real
    client, `server`) and once over `stand_in`."""
    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.rollout_server import ArcticRolloutServer
    from adapter_verl.session import SessionInfo
    from arctic_rl_core import dispatch
    from arctic_rl_core.backends.arctic import ArcticBackend
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    cfg = server.core_config(
        f"model.name={model_dir}",
        f"batch.max_prompt_length={PROMPT_LENGTH}",
        f"batch.max_response_length={RESPONSE_LENGTH}",
        f"checkpoint.path={root / 'ckpt'}",
    )
    backend = ArcticBackend.from_config(cfg)
    try:
        replica = ArcticRolloutServer(
            replica_rank=0, response_length=RESPONSE_LENGTH, max_num_seqs=8, prompt_length=PROMPT_LENGTH
        )
        settings = ArcticVerlSettings(
            core=cfg.model_dump(mode="json", exclude_unset=True),
            model_path=str(model_dir),
            trace_dir=str(root / "trace"),
        )
        replica.attach(SessionInfo(handle=backend.handle(), settings=settings))
        mark = server.request_count()

        async def both():
            arctic = await AgentLoopWorker(config, ReplicaClient(replica)).generate_sequences(
                agent_loop_batch(rows)
            )
            queue = await replica.take_sampler_queue_stats()
            await replica.disconnect()
            scripted = await AgentLoopWorker(config, stand_in).generate_sequences(agent_loop_batch(rows))
            return arctic, queue, scripted

        arctic, queue, scripted = asyncio.run(both())
        return AgentLoopRuns(
            arctic=arctic,
            stand_in=scripted,
            requests=server.requests(mark),
            queue=queue,
            trace_dir=root / "trace",
        )
    finally:
        dispatch.run(backend.shutdown())


def unpadded_row(output: Any, i: int) -> tuple[list[int], list[int], list[int], list[float] | None]:
    """(prompt ids, response ids, response mask, rollout log-probs) of row i without padding."""
    batch = output.batch
    prompt_width = batch["prompts"].shape[1]
    attention = batch["attention_mask"][i]
    prompt = batch["prompts"][i][attention[:prompt_width].bool()].tolist()
    valid = int(attention[prompt_width:].sum())
    response = batch["responses"][i][:valid].tolist()
    mask = batch["response_mask"][i][:valid].tolist()
    logprobs = batch["rollout_log_probs"][i][:valid].tolist() if "rollout_log_probs" in batch else None
    return prompt, response, mask, logprobs


def assert_rollout_log_probs_are_the_models(output: Any, model_dir: Path) -> int:
    """Every sampled token (mask 1) of every row carries the sampler's log-prob of it after the row's ids
    before it (the fixed-rollouts server reports the tiny model's own, teacher-forced: computed here
    again from the model directory); every observation / tool-response token carries 0. Returns how
    many sampled tokens it checked."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    checked = 0
    for i in range(len(output)):
        prompt, response, mask, logprobs = unpadded_row(output, i)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
        expected = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1].gather(
            -1, torch.tensor(response).unsqueeze(-1)
        )[:, 0]
        got, sampled = torch.tensor(logprobs), torch.tensor(mask).bool()
        assert torch.allclose(got[sampled], expected[sampled], atol=1e-4), i
        assert (got[~sampled] == 0).all(), i
        checked += int(sampled.sum())
    return checked


def turn_digests(output: Any) -> list[str]:
    """Per sampled turn of every row (a run of mask-1 tokens), the server's digest of (the row's ids before
    it, its ids): what the sampler's record holds when it conditioned on exactly verl's ids."""
    from arctic_rl_core.multi_turn.trajectory_fidelity import turn_starts
    from arctic_rl_testbed.reference.http_server import rollout_digest

    digests = []
    for i in range(len(output)):
        prompt, response, mask, _ = unpadded_row(output, i)
        for start in turn_starts(mask):
            end = next((j for j in range(start, len(mask)) if not mask[j]), len(mask))
            digests.append(rollout_digest(prompt + response[:start], response[start:end]))
    return sorted(digests)


def served_digests(requests: Sequence[Mapping[str, Any]]) -> list[str]:
    """The server's digests of what it served (`--request-log`'s /generate entries)."""
    return sorted(d for r in requests if r["route"] == "/generate" for d in r["rollouts"])

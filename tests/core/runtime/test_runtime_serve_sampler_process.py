"""`arctic-rl serve --reference --sampler-process`: the engine's sampler in its own forked process
(arctic_rl_testbed/reference/sampler_process.py) behind the HTTP API. An asynchronous GRPO run (the core's
overlapped pipeline, `async.max_staleness=1`, the token task) through `ArcticBackend` and the real
arctic-platform 0.1.4 client gets the same rollouts, log-probs and training numbers, bit for bit, as
the same run against a server whose sampler is a thread, with versions advancing one per step and no
rollout older than k. Two servers (--no-colocate: generation overlaps training), one run each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from arctic_rl_core import dispatch
from arctic_rl_core.async_grpo.token_task import TokenTask
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_testbed.reference.tokenizer import build_tokenizer
from wire_server import serve_reference

STEPS = 4
K = 1
WORDS = ("red", "blue", "green", "count", "three", "hello", "world", "name", "colour", "say")


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _async_run(root: Path, *, sampler_process: bool) -> dict[str, Any]:
    """One asynchronous run against its own server: what the sampler returned per generate call
    (weights version, token ids, log-probs) and the pipeline's step records."""
    name = "process" if sampler_process else "thread"
    args = ["--no-colocate", *(["--sampler-process"] if sampler_process else [])]
    tokenizer = build_tokenizer()  # the server's reference model's
    with serve_reference(root / name, args=args, file_root=root) as server:
        cfg = server.core_config(
            f"checkpoint.path={root / name / 'ckpt'}", "zorro.enable=false", "placement.colocate=false",
            f"async.max_staleness={K}", "batch.prompts_per_step=2", "batch.rollouts_per_prompt=4",
            "batch.max_prompt_length=8", "batch.max_response_length=16", "batch.micro_batch_size_per_gpu=8",
            "optimizer.lr=1e-2",  # every step moves the sampler's weights: a wrong version would show
        )  # fmt: skip
        backend = ArcticBackend.from_config(cfg)
        sampled: list[tuple[int, list[list[int]], list[list[float]]]] = []
        generate = backend.generate

        async def text_generate(prompts, params):
            # the on-prem API takes text: the task's prompts are chosen so that text round-trips to them
            out = await generate([tokenizer.decode(p, skip_special_tokens=True) for p in prompts], params)
            completions = out.completions
            sampled.append(
                (
                    out.weights_version,
                    [list(c.token_ids) for c in completions],
                    [list(c.logprobs) for c in completions],
                )
            )
            return out

        backend.generate = text_generate
        task = TokenTask.create(
            cfg, backend, pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer), prompt_len=8
        )

        def prompts_for_step(step: int) -> list[tuple[int, ...]]:
            texts = [f"{WORDS[(step + g) % 10]} {WORDS[(2 * step + g + 3) % 10]}" for g in range(2)]
            ids = [tuple(tokenizer.encode(t, add_special_tokens=True)) for t in texts]
            assert all(
                tokenizer.decode(p, skip_special_tokens=True) == t for p, t in zip(ids, texts, strict=True)
            )
            return ids

        task.prompts_for_step = prompts_for_step
        try:
            children = _children(server.process.pid)
            records = dispatch.run(task.run(STEPS))
            engine = server.get("/status")["engine"]
        finally:
            dispatch.run(backend.shutdown())
    return {"sampled": sampled, "records": records, "engine": engine, "children": children}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("sampler-process")
    return {
        "thread": _async_run(root, sampler_process=False),
        "process": _async_run(root, sampler_process=True),
    }


def test_the_sampler_runs_in_a_child_process_of_the_server_only_when_asked(runs):
    assert runs["process"]["engine"]["sampler_process"] is True
    assert len(runs["process"]["children"]) == 1  # the forked sampler
    assert runs["thread"]["engine"]["sampler_process"] is False and runs["thread"]["children"] == []


def test_an_async_wire_run_through_the_sampler_process_matches_the_threads_bit_for_bit(runs):
    thread, process = runs["thread"], runs["process"]
    assert len(process["sampled"]) == STEPS
    assert process["sampled"] == thread["sampled"]  # tokens, log-probs, weights versions
    assert [r.metrics for r in process["records"]] == [r.metrics for r in thread["records"]]
    for run in (thread, process):
        records = run["records"]
        assert [r.trainer_version for r in records] == list(range(STEPS))  # one version per step
        lags = [r.trainer_version - v for r in records for v in r.group_versions]
        assert all(0 <= lag <= K for lag in lags), lags
        assert max(lags) == K  # generation overlapped training: batch i sampled while step i - 1 trained
    # the weights moved every step: the rollouts of the versions differ
    assert len({str(tokens) for _, tokens, _ in process["sampled"]}) == STEPS


def test_a_sampler_process_the_engine_cannot_run_is_refused_before_the_server_starts(capsys):
    from arctic_rl_core.cli import main as cli_main

    argv = ["serve", "--reference", "--port", "0", "--sampler-process", "backend.reference.device=cuda"]
    args = cli_main.build_parser().parse_args(argv)
    assert args.func(args) == 2
    assert capsys.readouterr().err.strip() == (
        "arctic-rl serve: sampler_process=True with model.device='cuda': the sampler process shares its "
        "weights through CPU shared memory; use device='cpu' or sampler_process=False"
    )

"""The Arctic GPU path on one machine, in a few minutes: `recipes/gpu-smoke.sh` runs it twice
(colocated, then separate training / sampling GPUs). Per placement:

  start    the Arctic server launched locally by the real 0.1.4 client (HTTP), its jobs created
  env      what the server's Ray workers inherit (a probe task on the server's Ray cluster):
           ARCTIC_INFERENCE_ENABLED=1 and recipes/worker-env.sh's variables (issues 18.1, 18.5)
  generate text prompts with Arctic Inference on; sampled-token log-probs
  forward  the lean wire payload (issue 18.6): old log-probs, compared with the sampler's
  train    forward-backward + step on the same rollouts: PPO ratio 1 (KL ~ 0), finite loss and
           grad norm
  overlap  a long forward-backward, with a generate (and on Ray the server's health) issued while it
           runs: their latencies, and whether they answered before the step returned (issue 28:
           0.1.4's Ray server blocks the caller's loop for a whole step unless the compat layer runs
           it off the loop; checked on the Ray transport, measured on HTTP)
  sync     the core weight-sync policy (colocated: sleep level 2, CUDA IPC; separate: NCCL), then
           generate again from the synced weights
  save     checkpoint with export_hf and save_total_limit (issue 18.7)
  errors   a call past the timeout names op, job and server (issue 18.4; on Ray a blocking step too)

`--transport http` (default) launches a local HTTP server with the real 0.1.4 client; `--transport
ray` runs the in-process Ray server (`backend.kind=ray`) on the Ray cluster at RAY_ADDRESS. The
attention is sdpa with ZoRRo off unless `--attention flash_attention_2` (needs `--extra flash`).
Each phase prints its time and its checks; the last lines say what was verified, and the exit
code is the number of failed checks. `--backend reference` runs the same steps on the CPU
reference engine (how the tests check this driver without a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PROMPTS = (
    "Write a SQL query that counts the rows of table `schools`.",
    "What is 17 + 25? Answer with a number.",
)
WORKER_ENV_NAMES = (
    "ARCTIC_INFERENCE_ENABLED",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
    "PYTORCH_CUDA_ALLOC_CONF",
)


async def overlap(step, probes) -> tuple[float, dict[str, tuple[float, bool]]]:
    """Start `step()`, then await each `(name, probe)` of `probes` in turn while it runs: the step's
    seconds, and per probe its seconds and whether it returned before the step did. A step that blocks
    the event loop runs to its end before any probe starts (every probe then reports False)."""
    start = time.perf_counter()
    task = asyncio.ensure_future(step())
    await asyncio.sleep(0)  # the step starts (and, if it blocks the loop, finishes) here
    answered: dict[str, tuple[float, bool]] = {}
    for name, probe in probes:
        began = time.perf_counter()
        await probe()
        answered[name] = (time.perf_counter() - began, not task.done())
    await task
    return time.perf_counter() - start, answered


@dataclass
class Report:
    placement: str
    checks: list[tuple[str, str, bool, str]] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)

    def check(self, phase: str, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((phase, name, bool(ok), detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {phase}: {name}{f' ({detail})' if detail else ''}", flush=True)
        return bool(ok)

    def timed(self, phase: str):
        report = self

        class _Timer:
            def __enter__(self):
                print(f"== [{report.placement}] {phase}", flush=True)
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                report.times[phase] = time.perf_counter() - self.start
                print(f"   {phase}: {report.times[phase]:.1f} s", flush=True)
                return False

        return _Timer()

    @property
    def failed(self) -> list[tuple[str, str, bool, str]]:
        return [c for c in self.checks if not c[2]]


def smoke_config(args: argparse.Namespace, placement: str):
    """The core config of one smoke run (validated like any run's)."""
    from arctic_rl_core.config import load_config

    colocated = placement == "colocated"
    overrides = [
        "batch.prompts_per_step=2",
        f"batch.rollouts_per_prompt={args.rollouts}",
        "batch.micro_batch_size_per_gpu=2",
        "batch.max_prompt_length=64",
        f"batch.max_response_length={args.max_tokens}",
        "optimizer.lr=1.0e-6",
        "optimizer.total_training_steps=2",
        "loss.temperature=1.0",
        f"checkpoint.path={args.workdir}/{placement}/ckpt",
        "checkpoint.export_hf=true",
        "checkpoint.save_total_limit=1",
    ]
    if args.backend == "reference":
        overrides += ["backend.kind=reference", f"placement.colocate={str(colocated).lower()}"]
        return load_config(None, overrides)
    overrides += [
        "placement.training_gpus=1",
        "placement.sampling_gpus=1",
        "placement.log_prob_gpus=0",
        f"model.name={args.model}",
        f"kernels.attn_implementation={args.attention}",
        f"backend.request_timeout_s={args.request_timeout}",
        f"backend.job_ready_timeout_s={args.job_timeout}",
        f"placement.colocate={str(colocated).lower()}",
        f"weight_sync.cuda_ipc={str(colocated).lower()}",
        "arctic_inference.enable=true",
        f"vllm.gpu_memory_utilization={0.35 if colocated else 0.4}",
        "vllm.enforce_eager=true",
    ]
    if args.transport == "http":
        overrides += [
            "backend.kind=http",
            "backend.host=127.0.0.1",
            f"backend.port={args.port}",
            "backend.launch_local_server=true",
        ]
    else:
        overrides.append("backend.kind=ray")
    if not args.attention.startswith("flash_attention"):  # ZoRRo needs flash attention
        overrides += ["zorro.enable=false", "loss.loss_fn=arctic_rl_core"]
    return load_config(None, overrides)


def tokenizer_for(cfg, backend):
    if cfg.backend.kind == "reference":
        return backend.tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(cfg.model.name)


def probe_worker_env(report: Report, cfg) -> None:
    """What a Ray worker of the server's cluster sees: the server's jobs get no runtime
    environment in 0.1.4, so a plain task on the same cluster inherits the same variables."""
    from arctic_rl_core.config.plan import worker_env

    wanted = worker_env(cfg)
    if cfg.backend.kind == "reference":
        report.check("env", "reference backend: no server workers, no environment to deliver", wanted == {})
        return
    import ray

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray.init(address="auto", ignore_reinit_error=True, log_to_driver=False)

    @ray.remote(num_cpus=0)
    def read_env(names):
        return {name: os.environ.get(name) for name in names}

    seen = ray.get(read_env.remote(sorted(set(wanted) | set(WORKER_ENV_NAMES))), timeout=120)
    for name, value in sorted(wanted.items()):
        report.check(
            "env", f"server workers see {name}={value}", seen.get(name) == value, f"seen {seen.get(name)!r}"
        )
    for name in WORKER_ENV_NAMES:  # what recipes/worker-env.sh exported here reached the workers too
        if name in os.environ and name not in wanted:
            report.check("env", f"server workers see {name} as exported", seen.get(name) == os.environ[name])
    if cfg.placement.colocate:
        alloc = seen.get("PYTORCH_CUDA_ALLOC_CONF") or ""
        report.check(
            "env", "no expandable_segments under colocated vLLM sleep mode", "expandable" not in alloc
        )


async def run_placement(args: argparse.Namespace, placement: str) -> Report:
    import torch
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.backends.registry import create_backend
    from arctic_rl_core.weight_sync import WeightSyncPolicy, prepare_for_training, sync_after_step
    from arctic_rl_core.wire import (
        PayloadSpec,
        RolloutSample,
        build_forward_payload,
        build_train_payload,
        response_logprobs,
        with_response_logprobs,
    )

    report = Report(placement)
    cfg = smoke_config(args, placement)
    with report.timed("start"):
        backend = await asyncio.to_thread(create_backend, cfg)
        tokenizer = tokenizer_for(cfg, backend)
        state = await backend.state()
        report.check("start", "server up, jobs created", True, f"colocated={state.colocated}")
    try:
        with report.timed("env"):
            await asyncio.to_thread(probe_worker_env, report, cfg)
        prompts = [p for p in PROMPTS for _ in range(args.rollouts)]
        params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, logprobs=True, seed=0)
        with report.timed("generate"):
            out = await backend.generate(prompts, params)
            lengths = [len(c.token_ids) for c in out.completions]
            report.check(
                "generate", f"{len(prompts)} completions, every one non-empty", min(lengths) > 0, f"{lengths}"
            )
            sampled = [c.logprobs for c in out.completions]
            finite = all(lp is not None and all(math.isfinite(v) and v <= 1e-3 for v in lp) for lp in sampled)
            report.check("generate", "sampled-token log-probs returned, finite, <= 0", finite)
        policy = WeightSyncPolicy.from_config(cfg)
        samples = [
            RolloutSample(
                prompt_ids=tokenizer.encode(prompt),
                response_ids=list(c.token_ids),
                advantages=1.0 if i % 2 == 0 else -1.0,
            )
            for i, (prompt, c) in enumerate(zip(prompts, out.completions, strict=True))
        ]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        spec = PayloadSpec.from_config(cfg, pad_token_id=int(pad))
        with report.timed("forward"):
            await prepare_for_training(backend, policy)
            forward = build_forward_payload(samples, spec)
            report.check(
                "forward",
                "lean payload (bool masks, prompts [B, P, 0], no position_ids, own widths)",
                forward.batch["attention_mask"].dtype == torch.bool
                and forward.batch["prompts"].numel() == 0
                and "position_ids" not in forward.batch,
                f"P={forward.meta['max_prompt_len']} R={forward.meta['max_response_len']}",
            )
            fwd = await backend.forward(forward)
            old_B_R, mask_B_R = response_logprobs(fwd.logprobs_B_S, forward, spec)
            report.check("forward", "old log-probs finite", bool(torch.isfinite(old_B_R[mask_B_R]).all()))
            if cfg.backend.kind != "reference":  # the reference sampler is the trainer's own copy
                vllm = torch.zeros_like(old_B_R)
                for b, lp in enumerate(sampled):
                    vllm[b, : len(lp)] = torch.tensor(lp)
                gap = float((old_B_R - vllm)[mask_B_R].abs().mean())
                report.check(
                    "forward",
                    "trainer and sampler agree on the sampled tokens",
                    gap < 0.2,
                    f"mean |diff| {gap:.4f}",
                )
        with report.timed("train"):
            train = build_train_payload(with_response_logprobs(samples, old_B_R, field="old_logprobs"), spec)
            result = await backend.forward_backward(train)
            n = [len(x.response_ids) for x in samples]
            expected = -sum(float(x.advantages) * k for x, k in zip(samples, n, strict=True)) / sum(n)
            report.check(
                "train",
                "loss = -token-mean(A) at ratio 1",
                math.isfinite(result.loss) and abs(result.loss - expected) < 1e-2,
                f"loss {result.loss:.4f}, expected {expected:.4f}",
            )
            kl = result.metrics.get("actor/ppo_kl", 0.0)
            report.check(
                "train",
                "PPO ratio 1 right after the forward (|ppo_kl| < 1e-3)",
                abs(kl) < 1e-3,
                f"ppo_kl {kl:.2e}",
            )
            step = await backend.step()
            report.check(
                "train",
                "step: grad norm finite and > 0",
                math.isfinite(step.grad_norm) and step.grad_norm > 0,
                f"{step.grad_norm:.4g}",
            )
        if cfg.placement.colocate:
            print(
                f"== [{placement}] overlap SKIPPED (colocated: the sampler sleeps while training)", flush=True
            )
        else:
            with report.timed("overlap"):
                step = await overlap_phase(report, backend, cfg, samples, spec, old_B_R, prompts, params)
        if args.skip_sync:
            print(
                f"== [{placement}] sync SKIPPED (--skip-sync: NCCL refuses two ranks on one GPU)",
                flush=True,
            )
        else:
            with report.timed("sync"):
                version = await sync_after_step(backend, policy)
                report.check(
                    "sync", "weights version advanced to the trainer's", version == step.step, f"v{version}"
                )
                again = await backend.generate(prompts[:2], params)
                report.check(
                    "sync", "generate after the sync", all(len(c.token_ids) > 0 for c in again.completions)
                )
                level = policy.inference_sleep_level
                report.check(
                    "sync",
                    f"sampler sleeps at level {level} while training",
                    not policy.colocated or level == 2,
                )
        with report.timed("save"):
            await prepare_for_training(backend, policy)
            root = Path(cfg.checkpoint.path)
            saved = None
            for n in (1, 2):
                saved = await backend.save_checkpoint(
                    str(root),
                    n,
                    export_hf=cfg.checkpoint.export_hf,
                    save_total_limit=cfg.checkpoint.save_total_limit,
                )
            if root.is_dir():  # the server writes on this machine (a launched local server)
                kept = sorted(p.name for p in root.iterdir() if p.name.startswith("checkpoint-"))
                report.check(
                    "save",
                    "save_total_limit=1 kept the newest checkpoint only",
                    kept == ["checkpoint-2"],
                    f"{kept}",
                )
                report.check(
                    "save",
                    "export_hf wrote a Hugging Face copy",
                    (Path(saved) / "hf" / "config.json").is_file(),
                    saved,
                )
            else:
                report.check("save", "checkpoint saved", bool(saved), f"{saved} (server filesystem)")
        if cfg.backend.kind != "reference":
            with report.timed("errors"):
                from arctic_rl_core.backends.arctic_errors import ArcticCallError

                backend._client.config.request_timeout = 1e-3  # the next call cannot make it
                server = "in-process Ray server" if cfg.backend.kind == "ray" else "http://"
                try:
                    await backend.step()
                    report.check("errors", "a call past the timeout fails", False, "it returned")
                except ArcticCallError as exc:
                    text = str(exc)
                    report.check(
                        "errors",
                        "timeout names op, job and server",
                        "'step' on training job" in text and server in text,
                        text[:160],
                    )
                finally:
                    backend._client.config.request_timeout = float(args.request_timeout)
    finally:
        with report.timed("shutdown"):
            await backend.shutdown()
    return report


async def overlap_phase(report: Report, backend, cfg, samples, spec, old_B_R, prompts, params):
    """A forward-backward of 8x the rollouts, a generate (and on Ray the server's health) issued while it
    runs. On the Ray transport they must answer before the step returns; elsewhere it is measured.
    Returns the optimizer step that applies the step's gradients."""
    from arctic_rl_core.wire import build_train_payload, with_response_logprobs

    rows = with_response_logprobs(samples, old_B_R, field="old_logprobs") * 8
    train = build_train_payload(rows, spec)
    probes = [("generate", lambda: backend.generate(prompts[:2], params))]
    server = getattr(getattr(getattr(backend, "_client", None), "transport", None), "_server", None)
    if cfg.backend.kind == "ray" and server is not None:
        probes.append(("health", server.health))
    step_s, answered = await overlap(lambda: backend.forward_backward(train), probes)
    for name, (seconds, during) in answered.items():
        detail = f"{seconds * 1000:.0f} ms, step {step_s * 1000:.0f} ms"
        if cfg.backend.kind == "ray":
            report.check("overlap", f"{name} answered while the step ran", during, detail)
        else:
            report.check("overlap", f"{name} during a step (measured)", True, f"{detail}, during={during}")
    report.times["overlap_step"] = step_s
    report.times.update({f"overlap_{name}": seconds for name, (seconds, _) in answered.items()})
    return await backend.step()  # the accumulated gradients go; the next phases start clean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("arctic", "reference"), default="arctic")
    parser.add_argument("--transport", choices=("http", "ray"), default="http")
    parser.add_argument(
        "--attention",
        default="sdpa",
        help="kernels.attn_implementation (flash_attention_2 needs flash-attn: `--extra flash`)",
    )
    parser.add_argument("--placement", choices=("colocated", "separate", "both"), default="both")
    parser.add_argument("--model", default=os.environ.get("MODEL", "Qwen/Qwen3-0.6B"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8765")))
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--request-timeout", type=float, default=300.0)
    parser.add_argument("--job-timeout", type=float, default=420.0)
    parser.add_argument("--workdir", default=os.environ.get("SMOKE_DIR", "/tmp/arctic-rl-gpu-smoke"))
    parser.add_argument("--summary", help="write the checks as JSON here")
    parser.add_argument(
        "--skip-sync",
        action="store_true",
        help="no weight sync (separate placement faked on one GPU: NCCL refuses two ranks on one device)",
    )
    args = parser.parse_args(argv)
    placements = ("colocated", "separate") if args.placement == "both" else (args.placement,)
    reports = []
    for placement in placements:
        try:
            reports.append(asyncio.run(run_placement(args, placement)))
        except Exception as exc:  # a phase crashed: report it as a failed check, go on
            report = Report(placement)
            report.check("crash", f"{type(exc).__name__}: {exc}"[:400], False)
            reports.append(report)
    print("\n== summary")
    failed = 0
    for report in reports:
        times = ", ".join(f"{k} {v:.1f}s" for k, v in report.times.items())
        print(
            f"{report.placement}: {len(report.checks) - len(report.failed)}/{len(report.checks)} checks passed ({times})"
        )
        for phase, name, _ok, detail in report.failed:
            print(f"  FAILED {phase}: {name} {detail}")
        failed += len(report.failed)
    if args.summary:
        Path(args.summary).write_text(
            json.dumps(
                [{"placement": r.placement, "times": r.times, "checks": r.checks} for r in reports], indent=2
            )
        )
    print("VERIFIED" if failed == 0 else f"{failed} CHECK(S) FAILED")
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())

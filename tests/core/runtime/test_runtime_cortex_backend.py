"""`ArcticBackend` on backend.kind=cortex through the real arctic-platform 0.1.4 `CortexTransport`,
against `arctic-rl serve --reference --api cortex` in its own process: the ops Cortex has, in
Cortex's shapes; clear refusals for the ones it lacks; and the PAT nowhere but on the wire."""

from __future__ import annotations

import asyncio
import logging
import math
import pickle

import pytest

pytest.importorskip("tenacity")  # arctic-platform[cortex]

from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.arctic_errors import ArcticServerError
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.config import load_config
from arctic_rl_core.config.show import render_config_document
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload
from cortex_emulator import TOKEN_ENV, cortex_emulator  # noqa: F401

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 16]]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5]
LR = 1e-3


def _config(emulator, *extra: str):
    return load_config(
        None,
        [
            *emulator.overrides(),
            "model.name=arctic-rl/reference-tiny",
            "placement.training_gpus=1",
            "placement.sampling_gpus=1",
            "batch.prompts_per_step=2",
            "batch.rollouts_per_prompt=2",
            "batch.max_prompt_length=16",
            "batch.max_response_length=8",
            "kernels.attn_implementation=sdpa",
            f"optimizer.lr={LR}",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def run(cortex_emulator):  # noqa: F811
    """One backend through a whole step, everything it logged and raised kept for the checks."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    root = logging.getLogger()
    # setLevel (not `root.level =`): it clears the loggers' cached levels, which an earlier test's
    # caplog.set_level may have left at WARNING
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    cfg = _config(cortex_emulator)
    errors: dict[str, BaseException] = {}
    try:
        backend = ArcticBackend.from_config(cfg)

        async def steps():
            out = await backend.generate(
                PROMPTS, SamplingParams(max_tokens=6, temperature=0.7, logprobs=True)
            )
            spec = PayloadSpec.from_config(cfg, pad_token_id=0)
            samples = [
                RolloutSample(
                    prompt_ids=p, response_ids=list(c.token_ids), advantages=a, old_logprobs=list(c.logprobs)
                )
                for p, c, a in zip(PROMPTS, out.completions, ADVANTAGES, strict=True)
            ]
            payload = build_train_payload(samples, spec)
            train = await backend.forward_backward(payload)
            step = await backend.step()
            version = await backend.sync_weights()
            saved = await backend.save_checkpoint("/unused/on/cortex", 1)
            for name, call in (
                ("forward", lambda: backend.forward(payload)),
                ("load", lambda: backend.load_checkpoint("/unused/on/cortex", 1)),
                ("sleep", lambda: backend.sleep_inference()),
            ):
                try:
                    await call()
                except NotImplementedError as error:
                    errors[name] = error
            try:  # a request the server refuses: its error must not carry the token either
                await backend.generate([list(range(10, 60))], SamplingParams(max_tokens=2))
            except ArcticServerError as error:
                errors["server"] = error
            handle = pickle.dumps(backend.handle())
            await backend.shutdown()
            return out, train, step, version, saved, handle

        out, train, step, version, saved, handle = asyncio.run(steps())
        try:  # a wrong token: refused on the first call, and neither token in the error
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(TOKEN_ENV, "not-the-pat-4242")
                ArcticBackend.from_config(_config(cortex_emulator))
        except Exception as error:
            errors["wrong_pat"] = error
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return {
        "cfg": cfg,
        "backend": backend,
        "out": out,
        "train": train,
        "step": step,
        "version": version,
        "saved": saved,
        "handle": handle,
        "errors": errors,
        "records": records,
    }


def test_the_ops_cortex_has_in_cortexs_shapes(run):
    backend = run["backend"]
    assert not backend.serves_forward
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.token_ids) for c in run["out"].completions)
    # pi_old are the sampler's log-probs of the same weights: the ratio is 1 at this first update
    assert run["train"].metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)
    assert math.isfinite(run["train"].loss)
    step = run["step"]
    assert math.isnan(step.grad_norm) and step.learning_rate == pytest.approx(LR) and step.step == 1
    assert run["version"] == 1
    assert run["saved"].startswith("cortex:global_step")


def test_what_cortex_lacks_is_refused_naming_the_limit(run):
    errors = run["errors"]
    assert "cortex has no forward" in str(errors["forward"])
    assert "resume is not available on Cortex" in str(errors["load"]) and "/load" in str(errors["load"])
    assert "never colocates" in str(errors["sleep"])


def test_the_pat_is_on_the_wire_only(run, cortex_emulator, capfd):  # noqa: F811
    pat = cortex_emulator.pat
    errors = run["errors"]
    assert errors["server"].status == 400
    assert "401" in str(errors["wrong_pat"]) or "token" in str(errors["wrong_pat"]).lower()
    cfg = run["cfg"]
    texts = {
        "plan": str(cfg.plan()),
        "show": render_config_document(cfg),
        "client config": repr(cfg.to_client_config()) + cfg.to_client_config().model_dump_json(),
        "log records": "\n".join(f"{r.getMessage()} {r.args!r}" for r in run["records"]),
        "errors": "\n".join(f"{e!s} {e!r}" for e in errors.values()),
        "emulator log": cortex_emulator.log_text(),
        "captured output": "".join(capfd.readouterr()),
    }
    assert len(run["records"]) > 0
    for where, text in texts.items():
        assert pat not in text, where
        assert "not-the-pat-4242" not in text, where
    assert pat.encode() in run["handle"]  # the reconnect handle carries it to the run's other processes

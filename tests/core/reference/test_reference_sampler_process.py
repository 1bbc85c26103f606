"""The reference sampler in its own process (`sampler_process=True`): the same tokens and log-probs
as the in-thread sampler for the same seeds (through training, weight syncs, a checkpoint round trip
and LoRA), errors raised in the parent, and no orphan process: after shutdown, when the child dies,
when the engine's process is killed, and on Ctrl-C."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.wire import build_train_payload
from arctic_rl_testbed.reference.sampler_process import SamplerProcessError
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

PEFT = {"peft_type": "Lora", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _script(engine, ref, tmp_path) -> list:
    """Sampling (random, per-request seed, greedy with top log-probs), two training steps each followed
    by the client's weight sync, a checkpoint save, sampling, a load (the sampler RNG restored) and the
    same sampling again: everything the sampler returned, in order."""
    out = []

    def generate(**params):
        seqs, version = ref.run(
            engine.sample(
                [[11, 12, 13], [14, 15]],
                SamplingParams(max_tokens=6, logprobs=True, **params),
                top_logprobs=2,
            )
        )
        out.append((version, [(s.token_ids, s.logprobs, s.top_logprobs, s.finish_reason) for s in seqs]))

    generate(temperature=1.0)
    generate(temperature=0.7, top_k=50, seed=3)
    for step in range(2):
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=step), ref.spec(engine))))
        ref.run(engine.step())
        ref.run(engine.sync_weights())
        ref.run(engine.reset_prefix_cache())
        generate(temperature=1.0)
        generate(temperature=0.0)
    ref.run(engine.save_to(tmp_path / "ckpt"))
    generate(temperature=1.0)
    ref.run(engine.load_from(tmp_path / "ckpt"))
    generate(temperature=1.0)
    return out


@pytest.mark.parametrize("peft", [None, PEFT], ids=["full", "lora"])
def test_the_process_samples_what_the_thread_samples_bit_for_bit(engine_factory, ref, tmp_path, peft):
    settings = dict(colocated=False, optimizer={"lr": 1e-2}, peft=peft)
    threaded = _script(engine_factory(**settings), ref, tmp_path / "thread")
    engine = engine_factory(**settings, sampler_process=True)
    child = engine._sampler_process.pid
    assert child != os.getpid() and _alive(child)
    forked = _script(engine, ref, tmp_path / "process")
    assert forked == threaded  # tokens, log-probs (float equality), top log-probs, finish reasons
    assert [version for version, _ in forked] == [0, 0, 1, 1, 2, 2, 2, 2]
    assert forked[2] != forked[0] and forked[-1] == forked[-2]  # the sync reached the child; RNG restored
    ref.run(engine.shutdown())
    assert _wait_gone(child, 5.0)


def test_errors_come_back_and_a_dead_child_is_named(engine_factory, ref):
    engine = engine_factory(colocated=False, sampler_process=True)
    params = SamplingParams(max_tokens=4)
    with pytest.raises(ValueError, match="not below the model's max length"):
        ref.run(engine.sample([[11] * 5000], params))
    assert len(ref.run(engine.sample([[11, 12]], params))[0]) == 1  # still serving after the error
    child = engine._sampler_process.pid
    os.kill(child, signal.SIGKILL)
    assert _wait_gone(child, 5.0)
    with pytest.raises(SamplerProcessError, match=rf"pid {child}\) exited with code -9 during 'sample'"):
        ref.run(engine.sample([[11, 12]], params))


def test_a_sampler_process_dropped_without_close_stops_its_child() -> None:
    import gc

    from arctic_rl_core.config.reference_model import ReferenceModelConfig
    from arctic_rl_testbed.reference.model import build_model, load_tokenizer
    from arctic_rl_testbed.reference.sampler_process import SamplerProcess

    config = ReferenceModelConfig()
    tokenizer = load_tokenizer(config)
    process = SamplerProcess(build_model(config, 0, tokenizer).eval(), tokenizer, seed=0, num_threads=1)
    child = process.pid
    assert _alive(child)
    del process
    gc.collect()
    assert _wait_gone(child, 5.0)


def test_settings_refuse_what_the_process_cannot_serve() -> None:
    with pytest.raises(ValueError, match="sampler_process=True needs num_threads"):
        ReferenceEngineSettings(sampler_process=True, num_threads=None)
    with pytest.raises(ValueError, match=r"model\.device='cuda'"):
        ReferenceEngineSettings(sampler_process=True, model={"device": "cuda"})


def _engine_then_wait(conn) -> None:
    """In a forked process: an engine with a sampler process, its pid sent back, then wait to be killed."""
    import asyncio

    from arctic_rl_testbed.reference.engine import ReferenceBackend

    engine = ReferenceBackend(ReferenceEngineSettings(colocated=False, sampler_process=True))
    asyncio.run(engine.sample([[11, 12]], SamplingParams(max_tokens=2)))
    conn.send(engine._sampler_process.pid)
    time.sleep(600)


def test_no_orphan_when_the_engines_process_is_killed() -> None:
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    owner = ctx.Process(target=_engine_then_wait, args=(theirs,))  # not daemonic: it has a child
    owner.start()
    try:
        assert ours.poll(120), "the engine did not start"
        child = ours.recv()
        assert _alive(child)
    finally:
        os.kill(owner.pid, signal.SIGKILL)  # no cleanup code of the owner runs
        owner.join(10)
    assert _wait_gone(child, 5.0), "the sampler process outlived its killed parent"


def _generate_until_interrupted(conn) -> None:
    """In a forked process, its own process group (a terminal's foreground job): generate until Ctrl-C."""
    import asyncio

    from arctic_rl_testbed.reference.engine import ReferenceBackend

    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job starts with SIGINT ignored

    async def main() -> None:
        engine = ReferenceBackend(ReferenceEngineSettings(colocated=False, sampler_process=True))
        conn.send(engine._sampler_process.pid)
        while True:
            await engine.sample([[11, 12]] * 4, SamplingParams(max_tokens=64))
            conn.send("generated")

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        conn.send("interrupted")
        raise  # the process exits as a program does on Ctrl-C: exit hooks run, nothing closes the engine


def test_ctrl_c_leaves_no_sampler_process() -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C, while generate calls run: the program
    stops, its sampler process too."""
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    owner = ctx.Process(target=_generate_until_interrupted, args=(theirs,))
    owner.start()
    try:
        assert ours.poll(120), "the engine did not start"
        child = ours.recv()
        assert ours.recv() == "generated"  # the next generate call is in flight
        os.killpg(owner.pid, signal.SIGINT)  # the owner and its sampler, as a terminal does
        while (message := ours.recv()) == "generated":
            pass
        assert message == "interrupted"
        owner.join(30)
        assert owner.exitcode == 1
    finally:
        if owner.is_alive():
            os.kill(owner.pid, signal.SIGKILL)
            owner.join(10)
    assert _wait_gone(child, 5.0), "the sampler process outlived Ctrl-C"

"""The persistent background-loop bridge: reuse, error fidelity, timeouts, nesting, concurrency."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import threading

import pytest
from arctic_rl_core import dispatch
from arctic_rl_core.dispatch import DispatchLoop


def _event_loops_alive() -> int:
    gc.collect()
    return sum(issubclass(type(obj), asyncio.AbstractEventLoop) for obj in gc.get_objects())


async def _double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def test_ten_thousand_calls_leave_no_extra_threads_or_loops():
    assert dispatch.run(_double(1)) == 2  # warm: the one background thread exists from here on
    loop = dispatch.background_loop()
    threads_before = {t.ident for t in threading.enumerate()}
    loops_before = _event_loops_alive()

    total = 0
    for i in range(10_000):
        total += dispatch.run(_double(i))

    assert total == 2 * sum(range(10_000))
    assert dispatch.background_loop() is loop
    # Earlier tests' threads (servers, pools) may end meanwhile; none may start.
    assert {t.ident for t in threading.enumerate()} - threads_before == set()
    assert _event_loops_alive() <= loops_before
    assert [t.name for t in threading.enumerate()].count("arctic-rl-dispatch") == 1


class _CustomError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"custom failure {code}")
        self.code = code


@pytest.mark.parametrize(
    "error",
    [RuntimeError("server said no"), ValueError("bad field x=3"), KeyError("k"), _CustomError(7)],
    ids=["RuntimeError", "ValueError", "KeyError", "custom"],
)
def test_errors_keep_type_message_and_identity(error: BaseException):
    async def fail() -> None:
        await asyncio.sleep(0)
        raise error

    with pytest.raises(type(error)) as caught:
        dispatch.run(fail())
    assert caught.value is error
    assert str(caught.value) == str(error)
    # The same bridge keeps working after a failure (the legacy integration's bridge broke here).
    assert dispatch.run(_double(21)) == 42


def test_runtime_error_raised_twice_in_a_row_is_not_turned_into_a_reuse_error():
    async def fail(i: int) -> None:
        raise RuntimeError(f"attempt {i}")

    for i in range(3):
        with pytest.raises(RuntimeError, match=rf"^attempt {i}$"):
            dispatch.run(fail(i))


def test_timeout_cancels_the_coroutine_before_raising():
    observed: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            observed.append("cancelled")
            raise
        finally:
            observed.append("cleanup")

    with pytest.raises(TimeoutError, match=r"timed out after 0\.05s"):
        dispatch.run(slow(), timeout=0.05)
    # wait_for has finished the cancellation by the time the caller sees TimeoutError
    assert observed == ["cancelled", "cleanup"]
    assert not [t for t in asyncio.all_tasks(dispatch.background_loop()) if not t.done()]


def test_timeout_not_reached_returns_the_result():
    assert dispatch.run(_double(4), timeout=5.0) == 8


def test_works_inside_a_running_event_loop():
    async def framework_step() -> tuple[int, bool]:
        # A framework's sync method called from its own loop: the bridge must not try to
        # reuse or nest this loop.
        outer = asyncio.get_running_loop()
        value = dispatch.run(_double(10))
        return value, dispatch.background_loop() is not outer

    value, separate_loop = asyncio.run(framework_step())
    assert value == 20
    assert separate_loop


def test_calling_run_from_the_dispatch_thread_is_refused_not_deadlocked():
    async def reentrant() -> str:
        inner = _double(1)
        try:
            dispatch.run(inner)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    message = dispatch.run(reentrant(), timeout=5.0)
    assert "own thread" in message


def test_concurrent_callers_get_their_own_results_on_the_one_loop():
    dispatch_threads: set[str] = set()
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    async def tagged(caller: int, i: int) -> int:
        dispatch_threads.add(threading.current_thread().name)
        await asyncio.sleep(0)
        return caller * 1000 + i

    def caller(c: int) -> None:
        try:
            results[c] = [dispatch.run(tagged(c, i)) for i in range(200)]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for c in range(8):
        assert results[c] == [c * 1000 + i for i in range(200)]
    assert dispatch_threads == {"arctic-rl-dispatch"}


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="needs a coroutine object"):
        dispatch.run(_double)  # type: ignore[arg-type]
    coro = _double(1)
    with pytest.raises(ValueError, match="timeout=0"):
        dispatch.run(coro, timeout=0)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_private_loop_shutdown_cancels_pending_work_and_restarts_on_demand(kind: str):
    bridge = DispatchLoop(name="test-private-dispatch", new_loop=dispatch.loop_factory(kind))
    first = bridge.loop()
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    asyncio.run_coroutine_threadsafe(forever(), first)
    assert bridge.run(_double(2)) == 4
    thread = bridge.thread()
    bridge.shutdown()
    assert cancelled.is_set()
    assert thread is not None and not thread.is_alive()
    assert first.is_closed()
    bridge.shutdown()  # idempotent

    assert bridge.run(_double(3)) == 6  # a fresh loop on demand
    assert bridge.loop() is not first
    bridge.shutdown()


def test_the_default_loop_is_uvloop_where_installed():
    import uvloop

    assert isinstance(dispatch.background_loop(), uvloop.Loop)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_each_loop_kind_keeps_errors_timeouts_and_concurrency(kind: str):
    bridge = DispatchLoop(name=f"test-{kind}", new_loop=dispatch.loop_factory(kind))
    try:
        loop = bridge.loop()
        assert (type(loop).__module__.split(".")[0] == "uvloop") is (kind == "uvloop")
        assert sum(bridge.run(_double(i)) for i in range(2000)) == 2 * sum(range(2000))
        error = _CustomError(3)

        async def fail() -> None:
            await asyncio.sleep(0)
            raise error

        with pytest.raises(_CustomError) as caught:
            bridge.run(fail())
        assert caught.value is error
        with pytest.raises(TimeoutError, match=r"timed out after 0\.05s"):
            bridge.run(asyncio.sleep(30), timeout=0.05)
        results: dict[int, list[int]] = {}

        def caller(c: int) -> None:
            results[c] = [bridge.run(_double(c * 1000 + i)) for i in range(100)]

        threads = [threading.Thread(target=caller, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {c: [2 * (c * 1000 + i) for i in range(100)] for c in range(4)}
    finally:
        bridge.shutdown()


def test_loop_kind_comes_from_the_environment_and_bad_values_are_refused(monkeypatch):
    monkeypatch.setenv(dispatch.LOOP_ENV, "asyncio")
    assert dispatch.loop_factory() is asyncio.new_event_loop
    monkeypatch.setenv(dispatch.LOOP_ENV, "uvlop")
    with pytest.raises(
        ValueError, match=r"ARCTIC_RL_DISPATCH_LOOP='uvlop': expected one of auto, uvloop, asyncio"
    ):
        dispatch.loop_factory()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    with pytest.raises(RuntimeError, match="uvloop is not importable"):
        dispatch.loop_factory("uvloop")
    assert dispatch.loop_factory("auto") is asyncio.new_event_loop


def test_interpreter_exit_cancels_pending_work_and_exits_cleanly():
    script = textwrap.dedent(
        """
        import asyncio
        from arctic_rl_core import dispatch

        async def forever():
            try:
                await asyncio.sleep(3600)
            finally:
                print("cancelled at exit", flush=True)

        async def ping():
            return await asyncio.to_thread(lambda: "pong")  # the loop's default executor exists

        asyncio.run_coroutine_threadsafe(forever(), dispatch.background_loop())
        print(dispatch.run(ping()), flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pong", "cancelled", "at", "exit"]
    assert "Task was destroyed" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_timeout_raised_inside_the_coroutine_is_not_reported_as_ours():
    # issue 19 item 5: an HTTP client's own 3 s timeout inside the work is the work's error, with its
    # message and cause, not "timed out after 90s".
    cause = OSError("connection stalled")

    async def http_call() -> None:
        raise TimeoutError("request timed out after 3s") from cause

    with pytest.raises(TimeoutError) as raised:
        dispatch.run(http_call(), timeout=90)
    assert str(raised.value) == "request timed out after 3s"
    assert raised.value.__cause__ is cause

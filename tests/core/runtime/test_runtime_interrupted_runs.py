"""Runs that stop and resume (issue 32 item 1), in the core: every checkpoint file checked before a
resume uses it (`checkpoint_manifest`), one writer per run folder that a dead process does not hold
(`run_lock`), the jobs a stopped run left on an on-prem server destroyed by its resume and another
run's refused by name (`backends.arctic_leftovers`, through the real 0.1.4 client), the demo's process
chain ending together (`demo.process_chain`), and the one message per failure (`failure_messages`)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from arctic_rl_core.checkpoint_manifest import (
    MANIFEST,
    CheckpointDamaged,
    CheckpointFolder,
    StepSaveFailed,
    disk_full,
    save_failed,
    step_save,
    verify,
    write_manifest,
)
from arctic_rl_core.run_lock import RunFolderBusy, RunFolderLock

LATEST = "latest_ckpt_global_step.txt"
DEADLINE_S = 120  # polling bound for processes on a loaded machine (never a timing assertion)


def _step(root: Path, step: int, *, data: bytes = b"dataloader state") -> Path:
    folder = root / f"global_step_{step}"
    (folder / "policy").mkdir(parents=True)
    (folder / "data.pt").write_bytes(data * 10)
    (folder / "trainer_state.pt").write_bytes(b"trainer %d" % step)
    (folder / "policy" / "arctic_checkpoint.json").write_text(json.dumps({"step": step}))
    write_manifest(folder)
    return folder


@pytest.fixture
def run(tmp_path: Path) -> CheckpointFolder:
    """A SkyRL-style checkpoint folder with steps 1 and 2 saved, latest = 2."""
    folder = CheckpointFolder(tmp_path / "checkpoints", LATEST)
    _step(folder.root, 1)
    _step(folder.root, 2)
    folder.latest.write_text("2")
    return folder


# -- checkpoint checks --------------------------------------------------------------------------


def test_a_whole_checkpoint_is_the_resume_point_and_a_new_folder_has_none(run, tmp_path):
    assert run.resume_point() == 2
    assert CheckpointFolder(tmp_path / "new", LATEST).resume_point() is None
    manifest = json.loads((run.step_folder(2) / MANIFEST).read_text())["files"]
    assert sorted(manifest) == ["data.pt", "policy/arctic_checkpoint.json", "trainer_state.pt"]
    assert manifest["data.pt"]["bytes"] == 160


def _damage(run: CheckpointFolder, kind: str) -> Path:
    """Damage the run's checkpoint one way; returns the file the message must name."""
    step2 = run.step_folder(2)
    if kind == "latest file missing":
        run.latest.unlink()
        return run.latest
    if kind == "latest file not a number":
        run.latest.write_text("two\n")
        return run.latest
    if kind == "latest names a missing step":
        run.latest.write_text("7")
        return run.step_folder(7)
    if kind == "data.pt truncated":
        (step2 / "data.pt").write_bytes((step2 / "data.pt").read_bytes()[:50])
        return step2 / "data.pt"
    if kind == "trainer_state.pt changed":
        (step2 / "trainer_state.pt").write_bytes(b"trainer 9")  # same size, other bytes
        return step2 / "trainer_state.pt"
    if kind == "marker missing":
        (step2 / "policy" / "arctic_checkpoint.json").unlink()
        return step2 / "policy" / "arctic_checkpoint.json"
    if kind == "manifest missing":
        (step2 / MANIFEST).unlink()
        return step2 / MANIFEST
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "latest file missing",
        "latest file not a number",
        "latest names a missing step",
        "data.pt truncated",
        "trainer_state.pt changed",
        "marker missing",
        "manifest missing",
    ],
)
def test_a_damaged_or_missing_checkpoint_file_stops_the_resume_naming_it(run, kind):
    """Before: SkyRL 0.4.0 restarted at step 1 without its latest-step file, went on with different
    data after a warning for a truncated data.pt, and a truncated trainer_state.pt was a traceback
    that did not name the file."""
    named = _damage(run, kind)
    with pytest.raises(CheckpointDamaged) as raised:
        run.resume_point()
    assert raised.value.path == named
    message = str(raised.value)
    assert str(named) in message
    if kind == "latest file missing":
        assert "silently start again at step 1" in message and f"echo 2 > {run.latest}" in message
    elif kind == "manifest missing":
        assert "python -m arctic_rl_core.checkpoint_manifest" in message
    else:  # the fix falls back to the newest whole step before the one named (2 is whole, 1 below it)
        whole = 2 if kind.startswith("latest") else 1
        assert f"resume from step {whole} (its files are whole): `echo {whole} > {run.latest}`" in message


def test_rewinding_makes_an_earlier_step_the_latest_and_removes_the_later_ones(run):
    assert run.rewind_to(1) == [2]
    assert run.resume_point() == 1 and run.steps() == [1]
    assert run.rewind_to(None) == [1]
    assert run.resume_point() is None and not run.latest.exists()


def test_the_manifest_command_seals_a_folder_saved_without_one(run):
    (run.step_folder(2) / MANIFEST).unlink()
    done = subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.checkpoint_manifest", str(run.step_folder(2))],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    verify(run.step_folder(2))


# -- one writer per run folder ------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from arctic_rl_core.run_lock import RunFolderLock
    RunFolderLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_second_run_on_a_folder_is_refused_and_a_dead_holder_holds_nothing(tmp_path):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy) as raised:
            RunFolderLock(folder).acquire()
        assert f"pid {holder.pid}" in str(raised.value) and "in use by another run" in str(raised.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(DEADLINE_S)
    with RunFolderLock(folder) as lock:  # the kernel released the dead holder's lock
        assert lock.held
        with RunFolderLock(folder):  # this process may take its own folder again
            pass
        assert lock.held


# -- jobs a stopped run left on the server ------------------------------------------------------


def _config(wire, tmp_path: Path, run_name: str):
    return wire.core_config(
        "placement.training_gpus=1",
        "placement.sampling_gpus=1",
        f"checkpoint.path={tmp_path / run_name / 'server_checkpoints'}",
    ).to_client_config()


def test_a_resume_destroys_the_jobs_its_stopped_predecessor_left(wire, tmp_path, caplog):
    """Before: the resumed run's /initialize answered 409 "Sampling job already running" (a traceback)."""
    from arctic_rl_core import dispatch
    from arctic_rl_core.backends.arctic import ArcticBackend

    stopped = ArcticBackend.create(_config(wire, tmp_path, "run"))  # then "killed": never shut down
    left = sorted(wire.jobs())
    assert [wire.jobs()[j]["job_type"] for j in left] == ["sampling", "training"]
    resumed = ArcticBackend.create(_config(wire, tmp_path, "run"))
    try:
        now = wire.jobs()
        assert set(now).isdisjoint(left) and sorted(i["job_type"] for i in now.values()) == [
            "sampling",
            "training",
        ]
        notices = [
            r.getMessage() for r in caplog.records if "a stopped run of this folder left" in r.getMessage()
        ]
        assert len(notices) == 2 and all(wire.url in n for n in notices)
    finally:
        dispatch.run(resumed.shutdown())
        del stopped  # its jobs are gone: its shutdown would find nothing


def test_another_runs_jobs_are_refused_by_name_before_anything_is_created(wire, tmp_path):
    from arctic_rl_core import dispatch
    from arctic_rl_core.backends.arctic import ArcticBackend
    from arctic_rl_core.backends.arctic_leftovers import ArcticServerBusy

    first = ArcticBackend.create(_config(wire, tmp_path, "first"))
    try:
        before = wire.jobs()
        with pytest.raises(ArcticServerBusy) as raised:
            ArcticBackend.create(_config(wire, tmp_path, "second"))
        message = str(raised.value)
        assert "another run's jobs" in message and str(tmp_path / "first" / "server_checkpoints") in message
        assert "stop that run" in message
        assert wire.jobs() == before  # nothing created, nothing destroyed
    finally:
        dispatch.run(first.shutdown())


def test_cannot_connect_names_the_server_and_where_its_log_is(tmp_path):
    import socket

    from arctic_rl_core.backends.arctic import ArcticBackend
    from arctic_rl_core.backends.arctic_errors import ArcticConnectionError
    from arctic_rl_core.config import load_config

    with socket.socket() as sock:  # a free port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = load_config(
        None,
        [
            "backend.kind=http",
            "backend.host=127.0.0.1",
            f"backend.port={port}",
            f"checkpoint.path={tmp_path}",
            "model.name=arctic-rl/reference-tiny",
        ],
    )
    with pytest.raises(ArcticConnectionError) as raised:
        ArcticBackend.create(cfg.to_client_config())
    message = str(raised.value)
    assert f"cannot connect to the Arctic server at http://127.0.0.1:{port} (Connection refused)" in message
    assert (
        "arctic-rl serve --reference" in message and "python -m arctic_platform.common.http_server" in message
    )


# -- the demo's process chain -------------------------------------------------------------------

_DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from arctic_rl_testbed.demo.process_chain import stop_on_termination, watch_launcher
    marker = Path(sys.argv[1])
    with stop_on_termination():
        watch_launcher(interval_s=0.1)
        marker.write_text(f"running {os.getpid()}")
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            marker.write_text("stopped at a step boundary")
            sys.exit(130)
    """
)
_LAUNCHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from arctic_rl_testbed.demo.launch import Launch, run_launch
    launch = Launch(argv=[sys.executable, "-c", sys.argv[1], sys.argv[2]], env={}, cwd=Path.cwd())
    sys.exit(run_launch(launch))
    """
)
_OUTER = textwrap.dedent(  # stands for `uv run`: starts the launcher and waits
    """
    import subprocess, sys
    launcher = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
    print(launcher.pid, flush=True)
    sys.exit(launcher.wait())
    """
)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z"


def _poll(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("killed", ["outer", "launcher", "launcher-sigterm"])
def test_no_driver_outlives_its_launcher(tmp_path, killed):
    """Before: SIGKILL of the outer `uv run` left the launcher, the inner uv and the driver running."""
    marker = tmp_path / "driver"
    outer = subprocess.Popen(
        [sys.executable, "-c", _OUTER, _LAUNCHER, _DRIVER, str(marker)], stdout=subprocess.PIPE, text=True
    )
    launcher_pid = int(outer.stdout.readline())
    _poll(lambda: marker.is_file() and marker.read_text().startswith("running"), "the driver started")
    driver_pid = int(marker.read_text().split()[1])
    if killed == "outer":
        outer.send_signal(signal.SIGKILL)
    elif killed == "launcher":
        os.kill(launcher_pid, signal.SIGKILL)
    else:
        os.kill(launcher_pid, signal.SIGTERM)
    _poll(lambda: _gone(driver_pid), "the driver ended")
    _poll(lambda: _gone(launcher_pid), "the launcher ended")
    assert marker.read_text() == "stopped at a step boundary"  # as on Ctrl-C, not killed
    outer.wait(DEADLINE_S)


# -- one message per failure --------------------------------------------------------------------


def test_each_failure_a_user_meets_is_one_message_naming_the_fix(tmp_path):
    from arctic_rl_core.backends.arctic_errors import CallContext, connection_error
    from arctic_rl_core.failure_messages import explain
    from arctic_rl_testbed.reference.checkpoint import CheckpointWriteError

    run_dir = tmp_path / "run"
    died = connection_error(
        CallContext("forward-backward", "training job 3", "http://127.0.0.1:8000", server_log="its terminal"),
        ConnectionResetError("reset"),
    )

    class RayTaskError(Exception):  # what Ray raises in the driver for a failed actor call
        def __init__(self, cause):
            super().__init__("ray wrapping")
            self.cause = cause

    damaged = CheckpointDamaged(run_dir / "checkpoints" / "latest", "missing", "Restore it.")
    step_2 = run_dir / "checkpoints" / "global_step_2"
    cases = {
        "server died": died,
        "wrapped by Ray": RayTaskError(damaged),
        "full disk": CheckpointWriteError(run_dir / "checkpoints", OSError(errno.ENOSPC, "No space left")),
        "busy": RunFolderBusy(run_dir, {"pid": 12}),
        # torch.save's writer on a full disk: a RuntimeError without the errno; the disk checked
        "save failed": StepSaveFailed(step_2, RuntimeError("unexpected pos 704 vs 598"), full=False),
        "save failed, full": StepSaveFailed(step_2, RuntimeError("unexpected pos 704 vs 598"), full=True),
        "save failed, ENOSPC": StepSaveFailed(step_2, OSError(errno.ENOSPC, "No space left"), full=True),
    }
    resume = f"arctic-rl demo --resume {run_dir}"
    messages = {name: explain(error, resume=resume, run_dir=run_dir) for name, error in cases.items()}
    assert "training job 3 at http://127.0.0.1:8000" in messages["server died"]
    assert f"arctic-rl demo --resume {run_dir}" in messages["server died"]
    assert messages["wrapped by Ray"] == f"cannot resume {run_dir}: {damaged}"
    assert "the disk is full" in messages["full disk"] and "free space" in messages["full disk"]
    assert "pid 12" in messages["busy"]
    assert messages["save failed"] == (
        f"saving the checkpoint {step_2} failed: RuntimeError: unexpected pos 704 vs 598. Nothing of it was "
        "kept (the latest-step file names the last whole checkpoint). Fix: if the disk is full or over its "
        f"quota, free space; then continue with: {resume}"
    )
    assert "failed: the disk is full (or over its quota)" in messages["save failed, full"]
    assert messages["save failed, full"].endswith(f"then continue with: {resume}")
    assert messages["save failed, ENOSPC"].startswith("the disk is full: writing")
    assert explain(ValueError("a bug"), resume=resume) is None  # anything else keeps its traceback


def test_a_failed_save_removes_its_step_folder_and_says_whether_the_disk_was_full(tmp_path):
    """The adapters' saves: any failure (torch.save's RuntimeError hides a full disk's errno) removes
    the unfinished step folder, never the one the latest-step file names."""
    folder = CheckpointFolder(tmp_path, LATEST)
    (tmp_path / LATEST).write_text("1")
    whole, unfinished = folder.step_folder(1), folder.step_folder(2)
    for step_folder in (whole, unfinished):
        step_folder.mkdir()
        (step_folder / "trainer_state.pt").write_bytes(b"x")
    failed = save_failed(folder, unfinished, RuntimeError("unexpected pos 704 vs 598"))
    assert not unfinished.exists() and failed.folder == unfinished and failed.disk_full is False
    assert save_failed(folder, whole, RuntimeError("x")).folder == whole and whole.is_dir()
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path)
    assert disk_full(
        RuntimeError("I/O error: No space left on device (os error 28)"), tmp_path
    )  # safetensors
    assert not disk_full(OSError(errno.EFBIG, "File too large"), tmp_path)
    for raised, comes_out in [
        (RuntimeError("unexpected pos"), StepSaveFailed),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ]:
        unfinished.mkdir()
        with pytest.raises(comes_out), step_save(folder, unfinished):  # the adapters' saves
            raise raised
        assert not unfinished.exists() and whole.is_dir()


def test_a_failed_backend_save_names_its_step_and_the_partial_folder_a_server_may_leave(tmp_path):
    """The backend's own save failing (the server answered 400/500 or went away mid-save): the run says
    which step and why, that the server may have left a partial checkpoint-<step> it cannot delete, and
    how to continue, also when the cause is a server call error (which otherwise says "once the server
    answers again") and after Ray pickled it out of a verl worker."""
    import pickle

    from arctic_rl_core.backends.arctic_errors import CallContext, connection_error
    from arctic_rl_core.checkpoint_manifest import BackendSaveFailed, backend_save
    from arctic_rl_core.failure_messages import explain

    folder = CheckpointFolder(tmp_path / "checkpoints", LATEST)
    folder.root.mkdir()
    (folder.root / LATEST).write_text("1")
    unfinished = folder.step_folder(2)
    backend_root = folder.root / "arctic_backend"
    died = connection_error(
        CallContext("save", "training job 3", "http://127.0.0.1:8000", server_log="its terminal"),
        ConnectionResetError("reset"),
    )
    with pytest.raises(StepSaveFailed) as caught, step_save(folder, unfinished):
        unfinished.mkdir(parents=True)  # the framework's step folder, begun
        with backend_save(backend_root, 2):
            raise died
    failed = caught.value
    assert not unfinished.exists() and isinstance(failed.cause, BackendSaveFailed)
    backend = pickle.loads(pickle.dumps(failed.cause))  # as a Ray worker's error reaches the driver
    assert (backend.folder, backend.step, str(backend)) == (
        backend_root / "checkpoint-2",
        2,
        str(failed.cause),
    )
    partial = backend_root / "checkpoint-2"
    assert str(backend).startswith(f"the backend's save of {partial} failed ({type(died).__name__}: {died})")
    assert "The server may have left that folder partial on its disk" in str(backend)
    assert "a resume loads the last whole checkpoint, and the next save of checkpoint-2 writes" in str(
        backend
    )
    resume = "arctic-rl demo --resume RUN"
    assert explain(failed, resume=resume) == (
        f"saving the checkpoint {unfinished} failed: BackendSaveFailed: {backend}. Nothing of global_step_2 was "
        "kept here (the latest-step file names the last whole checkpoint). Fix: the server's log says why its "
        f"save failed (a full disk: free space there); then continue with: {resume}"
    )

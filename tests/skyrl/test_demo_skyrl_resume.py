"""`arctic-rl demo` runs that stop and resume honestly (issue 32 item 1), through SkyRL 0.4.0's real
trainer: a damaged or missing checkpoint file stops the resume naming it (never a restart at step 1
or a run on other data); an interrupt between SkyRL's checkpoint and the step's record runs that step
again (its record kept, nothing trained past `--steps`); a resume of a finished run trains nothing;
a moved run folder resumes; a second run on a folder is refused; a full disk during a save leaves no
partial checkpoint; the server dying mid-run is one message; a resume destroys the jobs its stopped
predecessor left on the server.

Every scenario resumes a copy of one finished one-step run (`--resume DIR --steps 2`, as a user
types it), so that each pays for GRPO steps only, not for a warm start and a first evaluation."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from arctic_rl_testbed.demo import run as demo_run
from arctic_rl_testbed.demo.run_log import MetricsLog
from demo_checks import tiny_options
from write_limit import file_size_limit

CHECKPOINTS = "checkpoints"
LATEST = "latest_ckpt_global_step.txt"


@pytest.fixture(scope="module")
def one_step(tmp_path_factory) -> Path:
    """A finished one-step run (reference backend in process; no warm start, short answers: the
    scenarios are about checkpoints, not learning)."""
    run_dir = tmp_path_factory.mktemp("resume") / "run"
    options = tiny_options(
        "skyrl", run_dir, steps=1, eval_samples=0, warm_start_steps=0, max_response_length=16
    )
    assert demo_run.run_demo(options) == 0
    return run_dir


def _copy(one_step: Path, tmp_path: Path, name: str = "run", **demo_settings) -> Path:
    target = tmp_path / name
    shutil.copytree(one_step, target, ignore=shutil.ignore_patterns(".arctic-rl.lock"))
    if demo_settings:  # e.g. the server the resumed run drives (a run's settings live in config.yaml)
        config = yaml.safe_load((target / "config.yaml").read_text())
        config["demo"].update(demo_settings)
        (target / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return target


def _steps(run_dir: Path) -> list[int]:
    return [int(r["step"]) for r in MetricsLog(run_dir).records("grpo_step")]


def _resume(run_dir: Path, capfd, *extra: str) -> tuple[int, str]:
    """`arctic-rl demo --resume DIR ...` in process: the exit code and what it printed (stdout, stderr),
    with rich's line wrapping undone."""
    code = demo_run.main(["--resume", str(run_dir), *extra])
    captured = capfd.readouterr()
    return code, " ".join((captured.out + captured.err).split())


@pytest.fixture
def interrupt_at(monkeypatch):
    """`interrupt_at(step, before_record=True)`: Ctrl-C when the demo writes that step's record (before
    it is written, or just after)."""

    original = MetricsLog.append

    def arm(step: int, *, before_record: bool) -> None:
        def append(self, kind, **fields):
            if kind == "grpo_step" and fields["step"] == step and before_record:
                raise KeyboardInterrupt
            record = original(self, kind, **fields)
            if kind == "grpo_step" and fields["step"] == step:
                raise KeyboardInterrupt
            return record

        monkeypatch.setattr(MetricsLog, "append", append)

    return arm


def _damage(run_dir: Path, kind: str) -> Path:
    root = run_dir / CHECKPOINTS
    if kind == "latest_ckpt_global_step.txt missing":
        (root / LATEST).unlink()
        return root / LATEST
    if kind == "data.pt truncated":
        path = root / "global_step_1" / "data.pt"
    elif kind == "trainer_state.pt truncated":
        path = root / "global_step_1" / "trainer_state.pt"
    else:  # the backend's weights (the reference engine's own record of sizes and digests)
        path = next((root / "arctic_backend" / "checkpoint-1").glob("model.*.safetensors"))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("latest_ckpt_global_step.txt missing", "Restore it: `echo 1 >"),
        ("data.pt truncated", "Restore it from a copy. Or start over: move"),
        ("trainer_state.pt truncated", "Restore it from a copy."),
        ("backend weights truncated", "Restore the checkpoint from a copy, or load an earlier one"),
    ],
)
def test_a_damaged_checkpoint_stops_the_resume_naming_the_file(one_step, tmp_path, capfd, kind, fix):
    """Before: SkyRL restarted at step 1 without its latest file, trained on other data after a log
    warning for a truncated data.pt, and a truncated trainer_state.pt was a traceback."""
    run_dir = _copy(one_step, tmp_path)
    named = _damage(run_dir, kind)
    code, said = _resume(run_dir, capfd, "--steps", "2")
    assert code == demo_run.FAILED_EXIT, said
    assert "Traceback" not in said and f"arctic-rl demo: cannot resume {run_dir}: {named}" in said
    assert fix in said
    assert _steps(run_dir) == [1]  # nothing trained


def test_an_interrupt_between_the_checkpoint_and_its_record_runs_that_step_again(
    one_step, tmp_path, capfd, interrupt_at
):
    """Step 2 is checkpointed, then Ctrl-C before its record. Before: that record was lost and the
    resume trained step 3 of a 2-step run."""
    run_dir = _copy(one_step, tmp_path)
    interrupt_at(2, before_record=True)
    code, _ = _resume(run_dir, capfd, "--steps", "2")
    assert code == demo_run.INTERRUPTED_EXIT
    assert (run_dir / CHECKPOINTS / LATEST).read_text() == "2" and _steps(run_dir) == [1]
    interrupt_at(0, before_record=True)  # disarmed
    code, said = _resume(run_dir, capfd)
    assert code == 0, said
    assert "step 2 was checkpointed but its record was not written" in said
    assert _steps(run_dir) == [1, 2]  # step 2 ran again, once, and nothing after it
    (last,) = [r for r in MetricsLog(run_dir).records("grpo_step") if r["step"] == 2]
    assert last["optimizer_steps"] == 2
    assert not (run_dir / CHECKPOINTS / "global_step_3").exists()


def test_resuming_a_finished_run_trains_nothing_more(one_step, tmp_path, capfd):
    """Before: SkyRL 0.4.0 resumed from its last step's checkpoint trained one step past the limit."""
    run_dir = _copy(one_step, tmp_path)
    code, said = _resume(run_dir, capfd)
    assert code == 0, said
    assert _steps(run_dir) == [1] and not (run_dir / CHECKPOINTS / "global_step_2").exists()


def test_a_moved_run_folder_resumes(one_step, tmp_path, capfd):
    """Before: the checkpoint marker named the backend folder by its absolute path."""
    moved = _copy(one_step, tmp_path, "first").rename(tmp_path / "elsewhere")
    marker = json.loads(
        (moved / CHECKPOINTS / "global_step_1" / "policy" / "arctic_checkpoint.json").read_text()
    )
    assert not os.path.isabs(marker["backend_path"])
    code, said = _resume(moved, capfd, "--steps", "2")
    assert code == 0, said
    assert _steps(moved) == [1, 2] and (moved / CHECKPOINTS / LATEST).read_text() == "2"


_HOLD = "import sys, time\nfrom arctic_rl_core.run_lock import RunFolderLock\nRunFolderLock(sys.argv[1]).acquire()\nprint('held', flush=True)\ntime.sleep(600)\n"


def test_a_second_run_on_the_same_folder_is_refused(one_step, tmp_path, capfd):
    run_dir = _copy(one_step, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, said = _resume(run_dir, capfd, "--steps", "2")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(120)
    assert code == demo_run.FAILED_EXIT and "Traceback" not in said
    assert f"is in use by another run (pid {holder.pid}" in said
    assert _steps(run_dir) == [1]


def test_a_failed_save_leaves_no_partial_checkpoint_and_one_message(one_step, tmp_path, capfd, monkeypatch):
    """SkyRL's save of step 2 meets a write the kernel refuses (`write_limit`: what a full disk does to
    torch.save's real writer, a RuntimeError without the errno): no partial global_step_2 is left, one
    message names it and the resume command, and the resume finishes the run. Before: the guard caught
    OSError only, so the partial folder stayed behind a traceback."""
    import torch

    run_dir = _copy(one_step, tmp_path)
    real_save = torch.save

    def refused_at_step_2(obj, f, *args, **kwargs):
        if "global_step_2" not in str(getattr(f, "name", f)):
            return real_save(obj, f, *args, **kwargs)
        with file_size_limit(64):  # data.pt (SkyRL logs that failure and goes on), trainer_state.pt
            return real_save(obj, f, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", refused_at_step_2)
        code, said = _resume(run_dir, capfd, "--steps", "2")
    assert code == demo_run.FAILED_EXIT and "Traceback" not in said
    assert f"saving the checkpoint {run_dir / CHECKPOINTS / 'global_step_2'} failed" in said
    assert "Nothing of it was kept" in said
    assert f"free space; then continue with: arctic-rl demo --resume {run_dir}" in said
    checkpoints = run_dir / CHECKPOINTS
    assert not (checkpoints / "global_step_2").exists() and (checkpoints / LATEST).read_text() == "1"
    code, said = _resume(run_dir, capfd)
    assert code == 0, said
    # SkyRL flushes the failed step's metrics when it fails: the run's steps keep the rerun's record
    steps = MetricsLog(run_dir).grpo_steps()
    assert [r["step"] for r in steps] == [1, 2] and steps[-1]["optimizer_steps"] == 2


def test_the_server_dying_mid_run_is_one_message(one_step, tmp_path, capfd, monkeypatch):
    """Before: 89-112 lines of traceback."""
    from wire_server import serve_reference

    with serve_reference(tmp_path / "server") as server:
        run_dir = _copy(one_step, tmp_path, server=server.url)
        original = MetricsLog.append

        def server_killed_after_step_2(self, kind, **fields):
            record = original(self, kind, **fields)
            if kind == "grpo_step" and fields["step"] == 2:
                server.process.send_signal(signal.SIGKILL)
                server.process.wait(120)
            return record

        monkeypatch.setattr(MetricsLog, "append", server_killed_after_step_2)
        code, said = _resume(run_dir, capfd, "--steps", "3")
    assert code == demo_run.FAILED_EXIT and "Traceback" not in said, said
    assert f"at {server.url}" in said and "the connection failed or the server closed it mid-call" in said
    assert "arctic-rl serve --reference" in said  # where that server's log is
    assert f"continue with: arctic-rl demo --resume {run_dir}" in said
    assert _steps(run_dir) == [1, 2]


def test_a_resume_cleans_up_the_jobs_its_stopped_predecessor_left(
    wire, one_step, tmp_path, capfd, monkeypatch
):
    """The predecessor ends without shutting its backend down (as a SIGKILL leaves it): its jobs stay
    on the server. Before: the resume's /initialize answered 409 "Sampling job already running" (a
    traceback)."""
    from arctic_rl_core.backends.arctic import ArcticBackend

    run_dir = _copy(one_step, tmp_path, server=wire.url)

    async def left_running(self):  # what a SIGKILLed predecessor does: nothing
        return None

    with monkeypatch.context() as patch:
        patch.setattr(ArcticBackend, "shutdown", left_running)
        code, said = _resume(run_dir, capfd, "--steps", "2")
    assert code == 0, said
    left = sorted(wire.jobs())
    assert len(left) == 2  # the stopped run's sampling and training jobs
    code, said = _resume(run_dir, capfd, "--steps", "3")
    assert code == 0, said
    assert _steps(run_dir) == [1, 2, 3]
    assert all(f"job {job} a stopped run of this folder left on {wire.url}" in said for job in left)

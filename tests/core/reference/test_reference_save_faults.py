"""Fault test of checkpoint saves (issue 19 item 4): the reference HTTP server is SIGKILLed at random
points while it trains and saves (re-saving `checkpoint-1`, saving into the job's root folder
without a step, saving new steps with pruning), and every checkpoint left visible must be wholly
old or wholly new: its weights are exactly those of its recorded step, its optimizer state has
that step, and every file it names is there.

A driver process (this file run as a script) builds the server and its engine once, then per
trial forks a child that serves the real aiohttp app over a loopback socket and drives its own
routes (`/forward-backward`, `/step`, `/save`) as fast as it can, and is killed: in even trials by
itself, just before the Nth fsync of its saves (N drawn per trial; only saves fsync, so every such
kill lands inside a save at a point the draw chooses, whatever the machine's speed), in odd trials
by the driver after a random delay (anywhere, also mid-write). The driver then checks the folder.
Forking keeps a trial at ~0.1-0.5 s instead of a server start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

TRIALS = 24
CHECKPOINT_DIR = "ckpt"
FSYNCS_PER_ROUND = (
    19  # a round's three saves: 3 data files + state file + its folder, twice `latest` + folder
)


def test_a_killed_save_leaves_every_checkpoint_wholly_old_or_wholly_new(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path), str(TRIALS), "19"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["trials"] == TRIALS
    assert report["torn"] == [], report["torn"][:5]
    # every self-kill landed inside a save (the child had said a save started), and re-saved and root
    # checkpoints were checked after most trials
    assert report["kills_during_save"] >= TRIALS // 2, report
    assert report["checked"] >= 2 * TRIALS, report
    print(f"save fault test: {report} in {time.monotonic() - start:.1f} s")


# -- the driver (run as a script) ----------------------------------------------------------------


def _payload(engine):
    from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload

    spec = PayloadSpec(
        pad_token_id=engine.pad_token_id, max_prompt_len=4, max_response_len=4, rollout_n=2, temperature=1.0
    )
    samples = [
        RolloutSample([11, 12, 13], [14, 15, 16], advantages=1.0, old_logprobs=[-2.0, -2.0, -2.0]),
        RolloutSample([21, 22], [23, 24, 25, 26], advantages=-1.0, old_logprobs=[-2.0] * 4),
    ]
    built = build_train_payload(samples, spec)
    return {"batch": built.batch, "meta": built.meta, "processing": built.processing}


def _weights_hash(path: Path) -> str:
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].float().numpy().tobytes())
    return digest.hexdigest()


def _kill_before_fsync(count: int) -> None:
    """SIGKILL this process just before its `count`-th `os.fsync` from now on."""
    real_fsync = os.fsync
    calls = 0

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == count:
            os.kill(os.getpid(), signal.SIGKILL)
        real_fsync(fd)

    os.fsync = fsync


def _child(server, sock, payload, trial: int, ready_fd: int, kill_at_fsync: int) -> None:
    """Serve the app on `sock` and hit its own routes until killed (by itself before its
    `kill_at_fsync`-th fsync when that is > 0). New steps are numbered past every earlier trial's
    (pruning keeps the highest numbers, as on the server)."""
    from aiohttp import ClientSession, web
    from arctic_platform import wire

    async def main() -> None:
        runner = web.AppRunner(server.application(), access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        body = wire.dumps(payload)
        async with ClientSession() as client:

            async def call(route: str, json_body=None, data=None) -> None:
                kwargs = {"json": json_body} if data is None else {"data": data}
                async with client.post(f"{base}{route}", params={"job_id": 1}, **kwargs) as response:
                    if response.status != 200:
                        raise RuntimeError(f"{route}: {response.status} {await response.text()}")

            async def step() -> None:
                await call("/forward-backward", data=body)
                await call("/step", {})

            for _ in range(trial % 4):
                await step()
            os.write(ready_fd, b"r")
            if kill_at_fsync:
                _kill_before_fsync(kill_at_fsync)
            while True:
                await step()
                os.write(ready_fd, b"s")  # a save starts
                await call("/save", {"step": 1})  # re-save an existing step
                await call("/save", {})  # the job's root folder, no step
                await call(
                    "/save", {"step": 1000 * (trial + 1) + server.engine.global_step, "save_total_limit": 2}
                )

    asyncio.run(main())


def _check(job_dir: Path, expected: dict[int, str]) -> tuple[int, list[str]]:
    import torch
    from arctic_rl_testbed.reference.checkpoint import OPTIMIZER_FILE, STATE_FILE, WEIGHTS_FILE

    checked, torn = 0, []
    folders = [
        job_dir,
        *sorted(p for p in job_dir.iterdir() if p.is_dir() and p.name.startswith("checkpoint-")),
    ]
    for folder in folders:
        state_path = folder / STATE_FILE
        if not state_path.is_file():
            continue  # not a checkpoint (a load answers 404)
        try:
            state = json.loads(state_path.read_text())
        except ValueError:
            torn.append(f"{folder.name}: {STATE_FILE} is half written")
            continue
        step = state["global_step"]
        files = state.get("files") or {"weights": WEIGHTS_FILE, "optimizer": OPTIMIZER_FILE}  # format 1
        if not all((folder / name).is_file() for name in files.values()):
            torn.append(f"{folder.name}: files missing {files}")
            continue
        try:
            weights = _weights_hash(folder / files["weights"])
            optimizer = torch.load(folder / files["optimizer"], weights_only=True)
        except Exception as error:  # a half-written file
            torn.append(f"{folder.name}: unreadable ({type(error).__name__})")
            continue
        if weights != expected.get(step):
            torn.append(f"{folder.name}: weights are not step {step}'s")
        steps = {int(s["step"]) for s in optimizer["state"].values()}
        if steps != {step}:
            torn.append(f"{folder.name}: optimizer at steps {steps}, state at {step}")
        checked += 1
    latest = job_dir / "latest"
    if latest.exists() and not (job_dir / f"checkpoint-{latest.read_text().strip()}" / STATE_FILE).is_file():
        torn.append(f"latest -> {latest.read_text()!r}, which is not a checkpoint")
    return checked, torn


def main(argv: list[str]) -> int:
    import socket

    import torch

    torch.set_num_threads(1)
    from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    root, trials, seed = Path(argv[1]), int(argv[2]), int(argv[3])
    rng = random.Random(seed)
    server = ReferenceServer(ReferenceEngineSettings(num_threads=1), file_root=root)
    body = {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": CHECKPOINT_DIR}
    asyncio.run(server._create_job(body, "training", 42))  # engine built; its executor not started yet
    job_dir = Path(server.state.jobs[1].info["checkpoint_path"])
    payload = _payload(server.engine)
    checked = kills_during_save = 0
    torn: list[str] = []
    expected: dict[int, str] = {}
    pending_checks: list[Path] = []
    for trial in range(trials):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        read_fd, write_fd = os.pipe()
        kill_at_fsync = rng.randint(1, FSYNCS_PER_ROUND) if trial % 2 == 0 else 0
        pid = os.fork()
        if pid == 0:  # the server
            os.close(read_fd)
            try:
                _child(server, sock, payload, trial, write_fd, kill_at_fsync)
            finally:
                os._exit(1)
        os.close(write_fd)
        sock.close()
        os.read(read_fd, 1)  # warmed up
        if not kill_at_fsync:
            time.sleep(rng.uniform(0.0, 0.4))
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)  # a self-kill: the child's own SIGKILL, nothing else
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (trial, status)
        with os.fdopen(read_fd, "rb") as pipe:
            kills_during_save += int(b"s" in pipe.read())
        snapshot = root / f"trial-{trial}"
        subprocess.run(["cp", "-a", str(job_dir), str(snapshot)], check=True)
        pending_checks.append(snapshot)
    # The weights each step must have: the same deterministic steps, run here to completion.
    steps_needed = 0
    for snapshot in pending_checks:
        for state in snapshot.rglob("trainer_state.json"):
            try:
                steps_needed = max(steps_needed, json.loads(state.read_text())["global_step"])
            except ValueError:
                continue  # a half-written state file: _check reports it
    reference = root / "reference"
    for step in range(1, steps_needed + 1):
        asyncio.run(server.engine.train(payload))
        asyncio.run(server.engine.step())
        asyncio.run(server.engine.save_to(reference / str(step)))
        state = json.loads((reference / str(step) / "trainer_state.json").read_text())
        weights = state.get("files", {}).get("weights", "model.safetensors")
        expected[step] = _weights_hash(reference / str(step) / weights)
    for snapshot in pending_checks:
        count, problems = _check(snapshot, expected)
        checked += count
        torn += [f"{snapshot.name}/{p}" for p in problems]
    print(
        json.dumps(
            {"trials": trials, "checked": checked, "kills_during_save": kills_during_save, "torn": torn}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The reference engine's checkpoints under a full disk and after damage (issue 32 items 1-3): a save
that cannot be written keeps nothing of itself (no partial next checkpoint filling the disk) and says
so (the HTTP server: 507 naming the folder, not a bare 500); every data file is checked against the
size and SHA-256 its save recorded before anything is loaded, and a damaged one is named (409 over
HTTP). A write the kernel refuses (RLIMIT_FSIZE: EFBIG, `write_limit`) shows the real writers'
failure; the full disk's wording is a fault-injected ENOSPC (what a small tmpfs would do, without root)."""

from __future__ import annotations

import asyncio
import errno
import json
from pathlib import Path

import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from arctic_rl_core.checkpoint_manifest import CheckpointDamaged
from arctic_rl_core.wire import build_train_payload
from arctic_rl_testbed.reference import checkpoint as checkpoint_module
from arctic_rl_testbed.reference.checkpoint import STATE_FILE, CheckpointWriteError
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from write_limit import file_size_limit


def _trained(engine_factory, ref, steps: int = 1):
    engine = engine_factory(seed=5)
    for seed in range(steps):
        ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=seed), ref.spec(engine))))
        ref.run(engine.step())
    return engine


def _full_disk_after(monkeypatch, nbytes: int) -> None:
    """Every checkpoint file gets `nbytes`, then the disk is full."""

    def write(path, data):
        with open(path, "wb") as handle:
            handle.write(bytes(data[:nbytes]))
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint_module, "_write_file", write)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_full_disk_keeps_nothing_of_the_save_and_the_previous_checkpoint_loads(
    engine_factory, ref, tmp_path, monkeypatch
):
    """Before: the partial model/optimizer files of the failed save stayed (filling the disk) behind
    a bare OSError."""
    engine = _trained(engine_factory, ref)
    ref.run(engine.save_checkpoint(str(tmp_path), step=1))
    before = _files(tmp_path)
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=9), ref.spec(engine))))
    ref.run(engine.step())
    with monkeypatch.context() as patch:
        _full_disk_after(patch, 4096)
        with pytest.raises(CheckpointWriteError) as raised:
            ref.run(engine.save_checkpoint(str(tmp_path), step=2))
        with pytest.raises(CheckpointWriteError):  # re-saving an existing checkpoint: the old one stays
            ref.run(engine.save_checkpoint(str(tmp_path), step=1))
    message = str(raised.value)
    assert str(tmp_path / "checkpoint-2") in message and "the disk is full" in message
    assert "nothing of this save was kept" in message and "free space" in message
    assert _files(tmp_path) == before  # no checkpoint-2, no partial file anywhere, latest still 1
    restored = engine_factory(seed=5)
    ref.run(restored.load_checkpoint(str(tmp_path), step=1))
    assert restored.global_step == 1


def test_a_write_the_kernel_refuses_keeps_nothing_of_the_save(engine_factory, ref, tmp_path):
    """Before: torch.save's and safetensors' writers raise RuntimeError / SafetensorError when a write
    fails (a full disk too), which the guard (OSError only) let through: the partial checkpoint-2 stayed."""
    engine = _trained(engine_factory, ref)
    ref.run(engine.save_checkpoint(str(tmp_path), step=1))
    before = _files(tmp_path)
    weights = json.loads((tmp_path / "checkpoint-1" / STATE_FILE).read_text())["files"]["weights"]
    assert (tmp_path / "checkpoint-1" / weights).stat().st_size > 4096  # the limit cuts the weights file
    ref.run(engine.forward_backward(build_train_payload(ref.samples(4, seed=9), ref.spec(engine))))
    ref.run(engine.step())
    with file_size_limit(4096), pytest.raises(CheckpointWriteError) as raised:
        ref.run(engine.save_checkpoint(str(tmp_path), step=2))
    assert raised.value.errno == errno.EFBIG and str(tmp_path / "checkpoint-2") in str(raised.value)
    assert _files(tmp_path) == before  # no checkpoint-2, no partial file, latest still 1
    ref.run(engine.save_checkpoint(str(tmp_path), step=2))  # the limit gone: the same save works
    assert (tmp_path / "latest").read_text() == "2"


@pytest.mark.parametrize(
    "damage", ["weights truncated", "optimizer changed", "rng missing", "state unreadable"]
)
def test_a_damaged_file_is_named_before_anything_is_loaded(engine_factory, ref, tmp_path, damage):
    engine = _trained(engine_factory, ref)
    folder = Path(ref.run(engine.save_checkpoint(str(tmp_path), step=1)))
    files = json.loads((folder / STATE_FILE).read_text())["files"]
    if damage == "weights truncated":
        named = folder / files["weights"]
        named.write_bytes(named.read_bytes()[:100])
    elif damage == "optimizer changed":
        named = folder / files["optimizer"]
        data = bytearray(named.read_bytes())
        data[-1] ^= 0xFF  # same size, other bytes
        named.write_bytes(bytes(data))
    elif damage == "rng missing":
        named = folder / files["rng"]
        named.unlink()
    else:
        named = folder / STATE_FILE
        named.write_text('{"format": ')
    fresh = engine_factory(seed=5)
    weights = {n: t.clone() for n, t in fresh.trainer_parameters().items()}
    with pytest.raises(CheckpointDamaged) as raised:
        ref.run(fresh.load_checkpoint(str(tmp_path), step=1))
    assert raised.value.path == named and str(named) in str(raised.value)
    assert "Restore the checkpoint from a copy, or load an earlier one" in str(raised.value)
    after = fresh.trainer_parameters()
    assert all(torch.equal(weights[n], after[n]) for n in weights)  # nothing was loaded
    assert fresh.global_step == 0


def test_over_http_a_full_disk_is_a_507_and_a_damaged_checkpoint_a_409(tmp_path, monkeypatch):
    async def main():
        server = ReferenceServer(ReferenceEngineSettings(num_threads=1), file_root=tmp_path)
        async with TestClient(TestServer(server.application())) as client:
            created = await client.post(
                "/initialize",
                json={"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "ck"},
            )
            job = (await created.json())["job_id"]
            saved = await client.post("/save", params={"job_id": job}, json={"path": "ck", "step": 1})
            assert saved.status == 200
            with monkeypatch.context() as patch:
                _full_disk_after(patch, 1024)
                full = await client.post("/save", params={"job_id": job}, json={"path": "ck", "step": 2})
                assert full.status == 507, await full.text()
                assert "the disk is full" in (await full.json())["detail"]
            assert not (tmp_path / "ck" / "checkpoint-2").exists()
            state = json.loads((tmp_path / "ck" / "checkpoint-1" / STATE_FILE).read_text())
            weights = tmp_path / "ck" / "checkpoint-1" / state["files"]["weights"]
            weights.write_bytes(weights.read_bytes()[:64])
            damaged = await client.post(
                "/load-checkpoint", params={"job_id": job}, json={"path": "ck", "step": 1}
            )
            assert damaged.status == 409, await damaged.text()
            assert weights.name in (await damaged.json())["detail"]

    asyncio.run(main())

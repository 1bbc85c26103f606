"""Hostile requests, round 2 (issue 32 item 2): every request to the reference servers is bounded
before it is stored or parsed. The on-prem API (`http_server`) and the Cortex emulator
(`cortex_server`): a body declaring more than the limit is answered 413 before a byte of it is read,
JSON nested deeper than `request_bounds.MAX_JSON_DEPTH` is a 400, sampling parameters outside vLLM's
ranges are a 400 naming the field, an `Authorization` header that is not UTF-8 is a 401 with nothing
logged; the Cortex emulator's chunk groups are checked against their declared sizes on each chunk,
abandoned ones expire, and a cancelled job frees them."""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import uuid

import pytest
import torch
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from arctic_platform import wire
from arctic_rl_testbed.reference.cortex_chunks import (
    MAX_CHUNKS,
    ChunkFrameError,
    ChunkGroups,
    ChunkStoreFull,
)
from arctic_rl_testbed.reference.cortex_server import CortexEmulator
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
from arctic_rl_testbed.reference.request_bounds import MAX_JSON_DEPTH
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

TOKEN = "tok-hostile-2"
PAT_HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
}
CORTEX = "/api/v2/databases/DB/schemas/S/cortex-training"
SOCKET_DEADLINE_S = 120  # a hang guard only: on the fixed code the answer comes at once


def _settings() -> ReferenceEngineSettings:
    return ReferenceEngineSettings(num_threads=1)


def _run(make_app, test) -> None:
    async def main():
        async with TestClient(TestServer(make_app())) as client:
            await test(client)

    asyncio.run(main())


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# -- JSON depth ---------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_deeply_nested_json_is_a_400_on_both_servers(depth) -> None:
    async def onprem(client):
        response = await client.post(
            "/initialize", data=_nested(depth), headers={"Content-Type": "application/json"}
        )
        assert response.status == 400, await response.text()
        assert f"nests deeper than {MAX_JSON_DEPTH} levels" in (await response.json())["detail"]

    _run(lambda: ReferenceServer(_settings()).application(), onprem)

    async def cortex(client):
        response = await client.post(
            CORTEX, data=_nested(depth), headers={**PAT_HEADERS, "Content-Type": "application/json"}
        )
        assert response.status == 400, await response.text()
        assert f"nests deeper than {MAX_JSON_DEPTH} levels" in (await response.json())["message"]

    _run(lambda: CortexEmulator(TOKEN, _settings()).application(), cortex)


def test_json_at_the_depth_limit_is_parsed() -> None:
    from arctic_rl_testbed.reference.request_bounds import parse_json

    value = parse_json(_nested(MAX_JSON_DEPTH), what="body")
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    assert depth == MAX_JSON_DEPTH


# -- sampling parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", math.nan),
        ("temperature", -1.0),
        ("temperature", math.inf),
        ("temperature", "hot"),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("max_tokens", 0),
        ("max_tokens", 2.5),
        ("top_k", -5),
        ("seed", True),
    ],
)
def test_sampling_parameters_outside_their_range_are_a_400_naming_the_field(field, value) -> None:
    async def test(client):
        created = await client.post(
            "/initialize", json={"model_name": REFERENCE_MODEL_NAME, "job_type": "sampling"}
        )
        assert created.status == 200
        params = {"max_tokens": 2, field: value}
        response = await client.post(
            "/generate",
            params={"job_id": (await created.json())["job_id"]},
            data=wire.dumps({"prompts": ["hi"], "sampling_params": params}),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert response.status == 400, (field, value, response.status)
        assert f"sampling_params.{field}=" in (await response.json())["detail"]

    _run(lambda: ReferenceServer(_settings()).application(), test)


def test_the_core_sampling_params_refuse_a_nan_temperature() -> None:
    from arctic_rl_core.backends.protocol import SamplingParams

    for temperature in (math.nan, math.inf, -0.5):
        with pytest.raises(ValueError, match="temperature"):
            SamplingParams(max_tokens=1, temperature=temperature)


# -- headers ------------------------------------------------------------------------------------


def _raw_exchange(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send `head` (+ `body`) on a fresh connection and read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_DEADLINE_S) as sock:
        sock.sendall(head + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received and _complete(received):
                break
        return received


def _complete(received: bytes) -> bool:
    head, _, rest = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(rest) >= int(line.split(b":", 1)[1])
    return False


def _serve_raw(app: web.Application, exchange) -> bytes:
    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await asyncio.to_thread(exchange, runner.addresses[0][1])
        finally:
            await runner.cleanup()

    return asyncio.run(main())


@pytest.mark.parametrize("api", ["onprem", "cortex"])
def test_a_non_utf8_authorization_header_is_a_401_and_logs_nothing(api, caplog) -> None:
    app = (
        ReferenceServer(_settings(), token=TOKEN).application()
        if api == "onprem"
        else CortexEmulator(TOKEN, _settings()).application()
    )
    path = b"/status" if api == "onprem" else CORTEX.encode()
    head = (
        b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\x80tok\r\n"
        b"X-Snowflake-Authorization-Token-Type: PROGRAMMATIC_ACCESS_TOKEN\r\nConnection: close\r\n\r\n"
    )
    with caplog.at_level(logging.DEBUG):
        answer = _serve_raw(app, lambda port: _raw_exchange(port, head))
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


# -- body size ----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["onprem", "cortex"])
def test_a_body_declaring_more_than_the_limit_is_refused_before_it_is_read(api) -> None:
    """The request declares 1 TiB and sends 1 KiB: the 413 comes back at once (before this commit
    the server waited for, and buffered, the body up to its limit: 1 GiB on-prem)."""
    declared = 1 << 40
    if api == "onprem":
        app = ReferenceServer(_settings(), max_body_bytes=64 * 1024).application()
        path, headers = b"/initialize", b""
    else:
        app = CortexEmulator(TOKEN, _settings()).application()
        path = f"{CORTEX}/job-1/forward-backward".encode()
        headers = b"".join(f"{k}: {v}\r\n".encode() for k, v in PAT_HEADERS.items())
    head = (
        b"POST "
        + path
        + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        + headers
        + f"Content-Length: {declared}\r\n\r\n".encode()
    )
    answer = _serve_raw(app, lambda port: _raw_exchange(port, head, b"\0" * 1024))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert str(declared).encode() in answer


# -- Cortex chunk groups ------------------------------------------------------------------------


def _chunk(
    payload: bytes,
    *,
    group: str,
    idx: int = 0,
    total: int = 1,
    frame_size: int | None = None,
    frame_sha256: str = "0" * 64,
) -> bytes:
    desc = {
        "chunk_idx": idx,
        "total_chunks": total,
        "frame_sha256": frame_sha256,
        "frame_size_bytes": len(payload) * total if frame_size is None else frame_size,
        "chunk_group_id": group,
        "operation": "fwd-bwd",
    }
    tensor = torch.frombuffer(bytearray(payload), dtype=torch.uint8).clone()
    return wire.dumps({"payload": tensor}, metadata={"request_chunk": desc})


@pytest.mark.parametrize(
    ("idx", "total", "frame_size", "what"),
    [
        (0, 2**40, 2**20, "total_chunks"),
        (2**40 - 1, 2**40, 2**20, "total_chunks"),
        (0, MAX_CHUNKS + 1, 2**20, "total_chunks"),
        (0, 8, 4, "total_chunks"),  # more chunks than bytes
        (0, 1, 2**40, "frame_size_bytes"),
        (0, 1, 0, "frame_size_bytes"),
        (5, 2, 1024, "chunk_idx"),
    ],
)
def test_a_chunk_declaring_more_than_the_bounds_is_refused_at_once(idx, total, frame_size, what) -> None:
    groups = ChunkGroups()
    with pytest.raises(ChunkFrameError, match=what):
        groups.accept(
            _chunk(b"x" * 16, group="g", idx=idx, total=total, frame_size=frame_size),
            operation="fwd-bwd",
            bare_allowed=False,
        )
    assert groups.open_bytes() == 0 and groups.open_groups() == 0


def test_chunks_carrying_more_than_the_declared_frame_drop_the_group() -> None:
    groups = ChunkGroups()
    groups.accept(
        _chunk(b"a" * 600, group="g", total=3, frame_size=1000), operation="fwd-bwd", bare_allowed=False
    )
    with pytest.raises(ChunkFrameError, match="more than its declared frame_size_bytes"):
        groups.accept(
            _chunk(b"b" * 600, group="g", idx=1, total=3, frame_size=1000),
            operation="fwd-bwd",
            bare_allowed=False,
        )
    assert groups.open_bytes() == 0 and groups.open_groups() == 0


def test_abandoned_chunk_groups_expire_and_the_open_bytes_are_capped() -> None:
    """200 abandoned 1 MiB groups held 201 MB forever before this commit; now they are dropped once
    untouched for `idle_expiry_s`, and a job's open groups never hold more than `max_open_bytes`."""
    import hashlib

    now = [0.0]
    groups = ChunkGroups(max_open_bytes=64 * 2**20, idle_expiry_s=600.0, clock=lambda: now[0])
    mib = b"z" * 2**20
    sha = hashlib.sha256(mib + mib).hexdigest()
    for i in range(64):
        groups.accept(
            _chunk(mib, group=f"g{i}", total=2, frame_sha256=sha), operation="fwd-bwd", bare_allowed=False
        )
    assert groups.open_bytes() == 64 * 2**20 and groups.open_groups() == 64
    with pytest.raises(ChunkStoreFull, match="retry"):
        groups.accept(_chunk(mib, group="one-more", total=2), operation="fwd-bwd", bare_allowed=False)
    now[0] = 599.0
    done = groups.accept(
        _chunk(mib, group="g0", idx=1, total=2, frame_sha256=sha), operation="fwd-bwd", bare_allowed=False
    )
    assert done.frame == mib + mib
    groups.attach("g0", "its execution")
    assert groups.open_groups() == 63  # g0 completed: its chunks were reassembled and released
    now[0] = 1200.0  # the others untouched since t=0, g0 done: all open groups expire
    assert len(groups.expire()) == 63
    assert groups.open_bytes() == 0 and groups.open_groups() == 0
    groups.accept(_chunk(mib, group="after", total=2), operation="fwd-bwd", bare_allowed=False)
    assert groups.open_bytes() == 2**20


def test_cancel_frees_the_jobs_unfinished_chunk_groups(tmp_path) -> None:
    emulator = CortexEmulator(TOKEN, _settings(), file_root=tmp_path)

    async def test(client):
        sub_jobs = [
            {
                "job_type": "training",
                "model_name": REFERENCE_MODEL_NAME,
                "training_config": {"n_gpus": 1, "max_seq_len": 64},
            }
        ]
        created = await client.post(CORTEX, json={"sub_job_configs": sub_jobs}, headers=PAT_HEADERS)
        assert created.status == 200, await created.text()
        job_id = (await created.json())["job_id"]
        for _ in range(600):  # the job starts in the background: poll, with a generous bound
            state = (await (await client.get(f"{CORTEX}/{job_id}", headers=PAT_HEADERS)).json())["status"]
            if state == "running":
                break
            await asyncio.sleep(0.1)
        assert state == "running"
        for _ in range(20):
            response = await client.post(
                f"{CORTEX}/{job_id}/forward-backward",
                data=_chunk(b"q" * 2**20, group=str(uuid.uuid4()), total=2),
                headers={**PAT_HEADERS, "Content-Type": "application/octet-stream"},
            )
            assert response.status == 200, await response.text()
        job = emulator.jobs[job_id]
        assert job.chunks.open_groups() == 20 and job.chunks.open_bytes() == 20 * 2**20
        assert (await client.post(f"{CORTEX}/{job_id}:cancel", headers=PAT_HEADERS)).status == 200
        assert job.chunks.open_groups() == 0 and job.chunks.open_bytes() == 0

    _run(emulator.application, test)

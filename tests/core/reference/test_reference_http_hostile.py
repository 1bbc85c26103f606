"""The reference HTTP server under hostile clients (issue 19 items 1 and 9): every path stays under
the file root, a token guards the routes (required off loopback), /status hides paths, and every
client mistake is a 4xx naming the field and the fix, answered before any side effect."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from arctic_platform import wire
from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_train_payload
from arctic_rl_testbed.reference.http_auth import BindRefused, check_bind, is_loopback
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME, ReferenceServer
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

TOKEN = "s3cret-token"


def _serve(test, file_root: Path | None, **server_kwargs) -> None:
    async def main():
        server = ReferenceServer(ReferenceEngineSettings(num_threads=1), file_root=file_root, **server_kwargs)
        async with TestClient(TestServer(server.application())) as client:
            await test(client, server)

    asyncio.run(main())


async def _post(
    client, route: str, body=None, *, job_id: int | None = None, headers=None, raw: bytes | None = None
):
    params = {} if job_id is None else {"job_id": job_id}
    kwargs = {"data": raw, "headers": {"Content-Type": "application/json", **(headers or {})}}
    if raw is None:
        kwargs = {"json": body, "headers": headers or {}}
    response = await client.post(route, params=params, **kwargs)
    try:
        payload = await response.json()
    except Exception:
        payload = await response.read()
    return response.status, payload


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "checkpoint-1").mkdir()
    (outside / "keep.txt").write_text("precious")
    (root / "escape").symlink_to(outside)
    return root, outside


# -- item 1: path confinement -------------------------------------------------------------------


def test_every_caller_chosen_path_stays_under_the_file_root(layout) -> None:
    root, outside = layout

    async def test(client, server):
        for checkpoint_path in (str(outside), "../outside", "escape/sub", "/etc"):
            status, body = await _post(
                client,
                "/initialize",
                {
                    "model_name": REFERENCE_MODEL_NAME,
                    "job_type": "training",
                    "checkpoint_path": checkpoint_path,
                },
            )
            assert status == 403 and "outside the server's file root" in body["detail"], (
                checkpoint_path,
                body,
            )
            assert "--file-root" in body["detail"]
        assert server.state.engine is None  # refused before the engine was built
        # a relative path resolves from the root, not from the server's working directory
        status, _ = await _post(
            client,
            "/initialize",
            {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "runs/a"},
        )
        assert status == 200 and (root / "runs" / "a" / "arctic_rl_job_1").is_dir()
        for route, body in (
            ("/save", {"path": str(outside), "step": 1, "save_total_limit": 1}),
            ("/save", {"path": "escape", "step": 2}),
            ("/load-checkpoint", {"path": str(outside / "checkpoint-1")}),
            ("/load-checkpoint", {"path": "../outside", "step": 1}),
        ):
            status, answer = await _post(client, route, body, job_id=1)
            assert status == 403 and "outside the server's file root" in answer["detail"], (
                route,
                body,
                answer,
            )
        status, answer = await _post(client, "/save", {"path": "saves/x", "step": 3}, job_id=1)
        assert status == 200 and answer["path"] == str(root / "saves" / "x" / "checkpoint-3")

    _serve(test, root)
    assert _tree(outside) == ["checkpoint-1", "keep.txt"]  # nothing written, read or pruned there
    assert (outside / "keep.txt").read_text() == "precious"


def test_no_file_root_given_means_a_temporary_one_removed_at_close(tmp_path: Path, monkeypatch) -> None:
    """Without a file root the server writes under a fresh temporary folder of its own (never the working
    directory: a server started in a checkout left `arctic-rl-serve-files/` there), removed when it stops."""
    import tempfile

    from arctic_rl_testbed.reference.file_root import TEMPORARY_PREFIX, FileRoot

    monkeypatch.chdir(tmp_path)
    seen: list[Path] = []

    async def test(client, server):
        root = server.files.root
        seen.append(root)
        assert root.parent == Path(tempfile.gettempdir()).resolve() and root.name.startswith(TEMPORARY_PREFIX)
        status, _ = await _post(
            client,
            "/initialize",
            {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "runs/a"},
        )
        assert status == 200 and (root / "runs" / "a" / "arctic_rl_job_1").is_dir()
        status, answer = await _post(client, "/save", {"path": "saves", "step": 1}, job_id=1)
        assert status == 200 and Path(answer["path"]).is_relative_to(root)

    _serve(test, None)
    assert not seen[0].exists()  # removed when the server closed
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    given = FileRoot(tmp_path / "kept")
    given.root.mkdir()
    given.remove_temporary()
    assert given.root.is_dir() and not given.temporary  # a given root is never removed


def test_serve_cli_prints_its_temporary_file_root_and_removes_it_on_sigterm(tmp_path: Path) -> None:
    import re
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "arctic_rl_core.cli.main", "serve", "--reference", "--port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        while not lines or "listening on" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, f"the server exited before listening: {lines}"
            lines.append(line)
        (announced,) = [
            m for m in map(re.compile(r"file root: (\S+) \(a temporary folder").search, lines) if m
        ]
        root = Path(announced.group(1))
        assert root.is_dir() and not root.is_relative_to(tmp_path)
        assert "--file-root DIR keeps the files" in "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0 and not root.exists() and list(tmp_path.iterdir()) == []


# -- item 1: authentication -----------------------------------------------------------------------


def test_a_token_guards_every_route_but_health(tmp_path: Path) -> None:
    async def test(client, server):
        assert (await client.get("/health")).status == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            assert (await client.get("/status", headers=headers)).status == 401
            status, body = await _post(
                client,
                "/initialize",
                {"model_name": REFERENCE_MODEL_NAME, "job_type": "sampling"},
                headers=headers,
            )
            assert status == 401 and "Authorization: Bearer" in body["detail"]
        assert server.state.engine is None
        good = {"Authorization": f"Bearer {TOKEN}"}
        status, _ = await _post(
            client,
            "/initialize",
            {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "c"},
            headers=good,
        )
        assert status == 200
        shown = await (await client.get("/status", headers=good)).json()
        assert shown["jobs"]["1"]["checkpoint_path"] == str(tmp_path / "c" / "arctic_rl_job_1")

    _serve(test, tmp_path, token=TOKEN)


def test_status_shows_no_paths_without_the_token(tmp_path: Path) -> None:
    async def test(client, server):
        await _post(
            client,
            "/initialize",
            {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "c"},
        )
        text = await (await client.get("/status")).text()
        assert str(tmp_path) not in text and "arctic_rl_job_1" not in text
        info = json.loads(text)["jobs"]["1"]
        assert info["job_type"] == "training" and info["checkpoint_path"].startswith("(hidden")

    _serve(test, tmp_path)


def test_a_non_loopback_bind_needs_a_token(capsys) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(BindRefused, match="Set --token"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", TOKEN)
    check_bind("127.0.0.1", None)
    from arctic_rl_core.cli.main import main

    assert main(["serve", "--reference", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "not a loopback address and no token is set" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["-1", "99999", "http"])
def test_a_port_out_of_range_is_a_usage_error(capsys, port) -> None:
    """Before: the socket's OverflowError as a traceback, after the server was built."""
    from arctic_rl_core.cli.main import main

    with pytest.raises(SystemExit) as raised:
        main(["serve", "--reference", "--port", port])
    assert raised.value.code == 2
    assert f"argument --port: {port if port == 'http' else int(port)}" in capsys.readouterr().err.replace(
        "'", ""
    )


# -- item 9: status codes, before any side effect ---------------------------------------------------


def _inf_grad_payload(server: ReferenceServer) -> dict:
    engine = server.engine
    spec = PayloadSpec(
        pad_token_id=engine.pad_token_id, max_prompt_len=3, max_response_len=3, rollout_n=1, temperature=1.0
    )
    samples = [RolloutSample([11, 12], [13, 14, 15], advantages=3e38, old_logprobs=[-1.0, -1.0, -1.0])]
    payload = build_train_payload(samples, spec)
    return {"batch": payload.batch, "meta": payload.meta, "processing": payload.processing}


def test_client_mistakes_are_4xx_naming_the_field_before_any_side_effect(tmp_path: Path) -> None:
    async def test(client, server):
        await _post(
            client,
            "/initialize",
            {"model_name": REFERENCE_MODEL_NAME, "job_type": "training", "checkpoint_path": "c"},
        )
        await _post(client, "/initialize", {"model_name": REFERENCE_MODEL_NAME, "job_type": "sampling"})
        job_dir = tmp_path / "c" / "arctic_rl_job_1"
        before = _tree(job_dir)
        cases = [
            ({"step": -5}, 422, "step=-5: must be a whole number >= 0"),
            ({"step": 1.5}, 422, "step=1.5"),
            ({"step": True}, 422, "step=True"),
            ({"step": "3"}, 422, "step='3'"),
            ({"step": 1, "save_total_limit": "two"}, 422, "save_total_limit='two'"),
            ({"step": 1, "save_total_limit": -1}, 422, "save_total_limit=-1"),
            ({"step": 1, "export_hf": "yes"}, 422, "export_hf='yes'"),
        ]
        for body, status, fragment in cases:
            got, answer = await _post(client, "/save", body, job_id=1)
            assert (got, fragment in answer["detail"]) == (status, True), (body, answer)
        # JSON Infinity (what a client's json.dumps writes for float('inf'))
        got, answer = await _post(client, "/save", raw=b'{"step": Infinity}', job_id=1)
        assert got == 422 and "step=inf" in answer["detail"]
        assert _tree(job_dir) == before  # nothing written: no checkpoint--5, no checkpoint-1
        # saving over an existing file
        (job_dir / "checkpoint-7").write_text("not a folder")
        got, answer = await _post(client, "/save", {"step": 7}, job_id=1)
        assert got == 409 and "is a file, not a folder" in answer["detail"]
        (tmp_path / "c" / "plain-file").write_text("x")
        got, answer = await _post(client, "/save", {"path": "c/plain-file"}, job_id=1)
        assert got == 409
        # /weight-norm with missing or wrong ids
        for body in ({}, {"training_job_id": "1", "sampling_job_id": 2}, [1, 2]):
            got, answer = await _post(client, "/weight-norm", body)
            assert (got == 422 and "training_job_id" in answer["detail"]) or "JSON object" in answer[
                "detail"
            ], answer
        got, answer = await _post(client, "/weight-norm", {"training_job_id": 1, "sampling_job_id": 2})
        assert got == 200 and answer["training_norm"] > 0
        # an infinite gradient norm at /step is the payload's fault
        response = await client.post(
            "/forward-backward",
            params={"job_id": 1},
            data=wire.dumps(_inf_grad_payload(server)),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert response.status == 200
        got, answer = await _post(client, "/step", {}, job_id=1)
        assert (
            got == 422 and "gradient norm is" in answer["detail"] and "check the payload" in answer["detail"]
        )

    _serve(test, tmp_path)


def test_an_oversize_body_is_413(tmp_path: Path) -> None:
    async def test(client, server):
        got, answer = await _post(client, "/initialize", raw=b"{" + b" " * 5000 + b"}")
        assert got == 413 and "larger than the server's limit of 4096 bytes" in answer["detail"]

    _serve(test, tmp_path, max_body_bytes=4096)

"""`arctic-rl serve --reference --api cortex` as a process: the PAT comes from $ARCTIC_CORTEX_PAT only,
every call is checked, and the token never appears in the server's output."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time

import pytest
import requests

PAT = "pat-cli-91be4c0a77"
SERVE = [sys.executable, "-m", "arctic_rl_core.cli.main", "serve", "--reference", "--api", "cortex"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ARCTIC_CORTEX_PAT"}
    env.update(extra)
    return env


def test_refuses_to_start_without_the_pat_env_or_with_a_command_line_token(tmp_path):
    missing = subprocess.run([*SERVE, "--port", "0"], env=_env(), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "export ARCTIC_CORTEX_PAT" in missing.stderr
    flagged = subprocess.run(
        [*SERVE, "--port", "0", "--token", "abc"],
        env=_env(ARCTIC_CORTEX_PAT=PAT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        flagged.returncode == 2 and "--token" in flagged.stderr and PAT not in flagged.stderr + flagged.stdout
    )


def test_served_calls_check_the_pat_and_never_log_it(tmp_path):
    """With --tls: https with the self-signed certificate it writes under the file root."""
    proc = subprocess.Popen(
        [*SERVE, "--tls", "--port", "0", "--num-threads", "1", "--file-root", str(tmp_path)],
        env=_env(ARCTIC_CORTEX_PAT=PAT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = []
    try:
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline, line = time.monotonic() + 120, ""
        while "listening on" not in line:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"emulator did not start: {''.join(output)!r}")
            if selector.select(timeout=1):
                line = proc.stdout.readline()
                output.append(line)
        port = int(line.strip().rsplit(":", 1)[1])
        assert line.strip().endswith(f"listening on https://127.0.0.1:{port}")
        cert = tmp_path / "cortex-tls" / "cert.pem"
        assert f"TLS certificate {cert}" in "".join(output)
        session = requests.Session()  # a per-request verify: REQUESTS_CA_BUNDLE would beat Session.verify
        prefix = f"https://127.0.0.1:{port}/api/v2/databases/DB/schemas/SC/cortex-training"
        good = {
            "Authorization": f"Bearer {PAT}",
            "X-Snowflake-Authorization-Token-Type": "PROGRAMMATIC_ACCESS_TOKEN",
        }
        assert session.get(prefix, timeout=30, verify=str(cert)).status_code == 401
        bad = session.get(
            prefix, headers={**good, "Authorization": "Bearer nope"}, timeout=30, verify=str(cert)
        )
        assert bad.status_code == 401 and PAT not in bad.text
        assert session.get(prefix, headers=good, timeout=30, verify=str(cert)).json() == {"jobs": []}
        refused = session.post(
            prefix, headers=good, json={"sub_job_configs": []}, timeout=30, verify=str(cert)
        )
        assert refused.status_code == 400 and refused.json()["code"] == 400
    finally:
        proc.terminate()
        try:
            rest, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        output.append(rest or "")
    text = "".join(output)
    assert "cortex-training" in text  # the routes line
    assert PAT not in text


def test_doctor_reports_the_cortex_transport():
    pytest.importorskip("tenacity")
    out = subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.cli.main", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0
    assert "Cortex transport (arctic_platform.client.transports.cortex): imports" in " ".join(
        out.stdout.split()
    )

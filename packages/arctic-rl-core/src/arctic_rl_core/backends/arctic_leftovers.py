"""Jobs a stopped run left on an on-prem Arctic server, destroyed before a run of the same folder
creates its own.

The 0.1.4 server holds one job per type and keeps a job until `/destroy`: a run stopped by Ctrl-C
or killed leaves its jobs there, and its resume's `/initialize` answered 409 "Sampling job already
running" (a traceback). Before creating jobs, `reclaim` reads the server's jobs (`GET /status` for
the ids, `GET /job/{id}` for each one's details) and sorts them:

- the stopped run's own: a training job whose checkpoint folder is this run's `checkpoint_path`
  (the server names it `<checkpoint_path>/arctic_rl_job_<id>`), and sampling / log-prob jobs of the
  same model when no other run's training job is there. They are destroyed, with a notice. The
  caller holds the run folder's lock (`arctic_rl_core.run_lock`), so that run is not alive.
- another run's: refused with `ArcticServerBusy`, naming the jobs and the fix, before anything is
  created.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

JOB_TYPES = ("sampling", "log_prob", "training")


class ArcticServerBusy(RuntimeError):
    """The server runs another run's jobs of the types this run needs."""


@dataclass(frozen=True)
class ServerJob:
    job_id: int
    job_type: str
    model_name: str | None
    checkpoint_path: str | None


def _same_folder(a: str, b: str) -> bool:
    return os.path.normpath(os.path.realpath(a)) == os.path.normpath(os.path.realpath(b))


def sort_jobs(
    jobs: list[ServerJob], *, model_name: str, checkpoint_path: str | None
) -> tuple[list[ServerJob], list[ServerJob]]:
    """(this folder's stopped run's jobs, other runs' jobs): see the module doc."""
    ours: list[ServerJob] = []
    theirs: list[ServerJob] = []
    for job in jobs:
        if job.job_type != "training":
            continue
        parent = os.path.dirname(job.checkpoint_path) if job.checkpoint_path else None
        mine = checkpoint_path is not None and parent is not None and _same_folder(parent, checkpoint_path)
        (ours if mine else theirs).append(job)
    foreign_training = bool(theirs)
    for job in jobs:
        if job.job_type == "training":
            continue
        mine = not foreign_training and job.model_name == model_name
        (ours if mine else theirs).append(job)
    return ours, theirs


def _server_jobs(session: Any, base: str, timeout: float) -> list[ServerJob] | None:
    """The server's jobs, or None when it cannot be asked (the client's own call then says why)."""
    try:
        response = session.get(f"{base}/status", timeout=timeout)
        response.raise_for_status()
        listed = response.json().get("jobs") or {}
    except Exception:  # refused, not JSON, no /status: job creation reports the server's state
        return None
    jobs = []
    for key, summary in listed.items():
        info = summary if isinstance(summary, dict) else {}
        try:  # /status may hide paths (the reference server without a token); /job/{id} has them
            detail = session.get(f"{base}/job/{int(key)}", timeout=timeout)
            if detail.ok:
                info = {**info, **detail.json()}
        except Exception:
            pass
        jobs.append(
            ServerJob(
                int(info.get("job_id", key)),
                str(info.get("job_type")),
                info.get("model_name"),
                info.get("checkpoint_path"),
            )
        )
    return jobs


def reclaim(client_config: Any, *, session: Any = None) -> list[str]:
    """Before this run creates its jobs on an on-prem HTTP server: destroy the jobs a stopped run of
    the same folder left there, or raise `ArcticServerBusy` when another run's jobs are in the way.
    Returns the notices (one per destroyed job, each also logged as a warning). BLOCKING (plain HTTP)."""
    backend = client_config.backend
    if getattr(backend, "type", "onprem") != "onprem" or getattr(backend, "protocol", "http") != "http":
        return []
    if getattr(backend, "launch_local_server", False):
        return []  # a server this client starts is new
    import requests

    base = f"http://{backend.host}:{backend.port}"
    timeout = min(float(client_config.request_timeout), 60.0)
    own_session = session is None
    session = session or requests.Session()
    try:
        jobs = _server_jobs(session, base, timeout)
        if not jobs:
            return []
        training = getattr(client_config, "training", None)
        ours, theirs = sort_jobs(
            jobs,
            model_name=client_config.model_name,
            checkpoint_path=getattr(training, "checkpoint_path", None),
        )
        needed = {t for t in JOB_TYPES if getattr(client_config, f"{t}_gpus", 0) > 0}
        blocking = [job for job in theirs if job.job_type in needed]
        if blocking:
            listed = "; ".join(
                f"{job.job_type} job {job.job_id} (model {job.model_name}"
                + (f", checkpoints {job.checkpoint_path}" if job.checkpoint_path else "")
                + ")"
                for job in blocking
            )
            raise ArcticServerBusy(
                f"the Arctic server at {base} already runs another run's jobs this run needs: {listed}. It holds "
                "one job per type: stop that run (its jobs end with it), or destroy them (POST /destroy), or use "
                "another server"
            )
        notices = []
        for job in ours:
            answer = session.post(
                f"{base}/destroy",
                params={"job_id": job.job_id},
                json={"job_type": job.job_type},
                timeout=timeout,
            )
            if answer.status_code >= 400 and answer.status_code != 404:  # 404: gone meanwhile
                raise ArcticServerBusy(
                    f"the Arctic server at {base} keeps the {job.job_type} job {job.job_id} a stopped run of this "
                    f"folder left (its /destroy answered HTTP {answer.status_code}: {answer.text[:300]}); destroy "
                    "it by hand or restart the server"
                )
            notices.append(
                f"destroyed the {job.job_type} job {job.job_id} a stopped run of this folder left on {base}"
            )
            logger.warning("%s", notices[-1])
        return notices
    finally:
        if own_session:
            session.close()

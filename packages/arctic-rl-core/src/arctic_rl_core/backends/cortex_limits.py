"""What Cortex cannot do through the arctic-platform 0.1.4 client, each with its reason and fix.

Read from the 0.1.4 wheel (`arctic_platform/client/transports/cortex.py`): `CortexTransport`
delivers `forward-backward`, `generate`, `step`, `save` and `operation`; any other op raises
`NotImplementedError("cortex has no <op>")`, and sleep/wake are silent no-ops because Cortex runs
training and sampling as separate sub-jobs. The Cortex REST surface has `/load` and
`/checkpoints`, but the 0.1.4 client has no op that reaches them (`load-checkpoint` is "not in
Cortex surface", `transport.OPS`), and its create-job body (`ArcticClientConfig.to_cortex`) has no
`source_checkpoint_info`. `ArcticBackend` raises these messages instead of sending the op, and the
dry run reports the settings that would need them (`config.validation`).
"""

from __future__ import annotations

CORTEX_LIMITS: dict[str, str] = {
    "forward": (
        "Cortex has no forward op (arctic-platform 0.1.4 CortexTransport: 'cortex has no forward'), so "
        "the server computes no old or reference log-probs: the old-log-prob pass serves the sampler's "
        "rollout log-probs instead, and KL against a reference model is not available"
    ),
    "load-checkpoint": (
        "resume is not available on Cortex through arctic-platform 0.1.4: the Cortex REST API has "
        "/{job_id}/load and /{job_id}/checkpoints, but the 0.1.4 client has no op that reaches them "
        "(CortexTransport raises 'cortex has no load-checkpoint') and its create-job body carries no "
        "source_checkpoint_info; checkpoints saved on Cortex stay in Cortex's checkpoint store "
        "(export them with Cortex's own tools). Start a fresh run (SkyRL trainer.resume_mode=none, "
        "verl trainer.resume_mode=disable), or resume on the ray/http backend"
    ),
    "sleep-inference": (
        "Cortex never colocates (training and sampling are separate sub-jobs; arctic-platform 0.1.4 "
        "makes sleep/wake no-ops): there is no sampler memory to release"
    ),
    "sleep-training": (
        "Cortex never colocates (training and sampling are separate sub-jobs; arctic-platform 0.1.4 "
        "makes sleep/wake no-ops): there is no trainer memory to release"
    ),
    "export_hf": (
        "a Cortex save takes only checkpoint_id and checkpoint_type (resumable | weights-only); it writes "
        "no Hugging Face copy next to the checkpoint"
    ),
    "save_total_limit": (
        "a Cortex save does not prune older checkpoints, and the 0.1.4 client cannot delete one "
        "(DELETE /{job_id}/checkpoints/{id} is not among its ops)"
    ),
}


def cortex_limit(op: str) -> str:
    """The reason `op` is not available on Cortex (a `CORTEX_LIMITS` entry)."""
    return f"{op} on backend.kind=cortex: {CORTEX_LIMITS[op]}"

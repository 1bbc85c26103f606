"""Several processes, one Arctic server: verl's trainer, its rank-0 worker and each rollout replica
build their own `ArcticBackend` (their own real 0.1.4 client over HTTP) from the one handle, in
verl's call order, against `arctic-rl serve --reference` in its own process.

The 0.1.4 server keeps no state a client can ask for, so the clients must share one record of it
(`arctic_rl_core.backends.arctic_state`). With a copy per object (what a pickled handle carried
before) the worker syncs weights into the sampler a replica put to sleep; the reference server's
state guard turns that into an HTTP 409 this test sees (the real server would sync silently). With
the shared Ray ledger the server receives exactly the sequence the weight-sync policy prescribes
and every replica reports the weights version the worker synced."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest

pytest.importorskip("arctic_platform.client")
ray = pytest.importorskip("ray")

from arctic_platform.client import ArcticClientConfig, OnPremConfig, TrainingConfig  # noqa: E402
from arctic_rl_core.backends.arctic import ArcticBackend  # noqa: E402
from arctic_rl_core.backends.arctic_compat import ArcticServerError  # noqa: E402
from arctic_rl_core.backends.arctic_state import LocalStateLedger, RayStateLedger  # noqa: E402
from arctic_rl_core.backends.protocol import SamplingParams  # noqa: E402
from arctic_rl_core.weight_sync import WeightSyncPolicy, prepare_for_training, sync_after_step  # noqa: E402
from arctic_rl_core.wire import (  # noqa: E402
    PayloadSpec,
    RolloutSample,
    build_forward_payload,
    build_train_payload,
    response_logprobs,
    with_response_logprobs,
)
from arctic_rl_testbed.reference.http_server import REFERENCE_MODEL_NAME  # noqa: E402
from arctic_rl_testbed.reference.tokenizer import build_tokenizer  # noqa: E402
from wire_server import serve_reference  # noqa: E402

PROMPTS = ["What is 2 + 3?", "Count the rows"]
SAMPLING = SamplingParams(max_tokens=4, temperature=1.0, seed=1)
REPLICAS = 2
STEPS = 2


@pytest.fixture(scope="module")
def ray_runtime():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module", params=[True, False], ids=["colocated", "separate"])
def server(request, tmp_path_factory):
    colocated = request.param
    root = tmp_path_factory.mktemp("shared_state")
    log = root / "requests.jsonl"
    args = ["--num-threads", "1", "--request-log", str(log), "--colocate" if colocated else "--no-colocate"]
    with serve_reference(root, args=args) as running:
        running.colocated = colocated
        running.requests = lambda: [json.loads(line) for line in log.read_text().splitlines()]
        yield running


def _client_config(server, tmp_path) -> ArcticClientConfig:
    return ArcticClientConfig(
        model_name=REFERENCE_MODEL_NAME,
        training_gpus=1,
        sampling_gpus=1,
        job_ready_timeout=60,
        request_timeout=120,
        training=TrainingConfig(checkpoint_path=str(tmp_path)),
        backend=OnPremConfig(host="127.0.0.1", port=server.port, colocate=server.colocated),
    )


def _policy(colocated: bool) -> WeightSyncPolicy:
    return WeightSyncPolicy(
        colocated=colocated,
        offload_optimizer_before_sync=colocated,
        sleep_training_after="all" if colocated else None,
    )


def _in_another_process(handle):
    """What Ray does to a handle sent to an actor: pickle it; the actor connects its own client."""
    return pickle.loads(pickle.dumps(handle)).connect()


async def _train_one_step(worker: ArcticBackend, tokenizer, results) -> None:
    spec = PayloadSpec(
        pad_token_id=tokenizer.pad_token_id,
        max_prompt_len=8,
        max_response_len=4,
        rollout_n=1,
        temperature=1.0,
    )
    samples = [
        RolloutSample(
            prompt_ids=tokenizer.encode(prompt)[:8],
            response_ids=list(completion.token_ids) or [tokenizer.eos_token_id],
            advantages=1.0 if i == 0 else -1.0,
        )
        for i, (prompt, completion) in enumerate(zip(PROMPTS, results, strict=True))
    ]
    forward = build_forward_payload(samples, spec)
    old = await worker.forward(forward)
    old_B_R, _ = response_logprobs(old.logprobs_B_S, forward, spec)
    samples = with_response_logprobs(samples, old_B_R, field="old_logprobs")
    await worker.forward_backward(build_train_payload(samples, spec))
    await worker.step()


async def _verl_run(owner: ArcticBackend, colocated: bool) -> list[list[int]]:
    """verl 0.9.1's sync trainer order (trainer_sync.py, the `arctic` replica and worker):
    replicas sleep -> worker syncs (on_init_end) -> per step: replicas generate, replicas sleep
    (on_sample_end), worker log-probs + update + step, worker syncs (on_step_end)."""
    handle = owner.handle()
    worker = _in_another_process(handle)
    replicas = [_in_another_process(handle) for _ in range(REPLICAS)]
    policy = _policy(colocated)
    tokenizer = build_tokenizer()
    versions: list[list[int]] = []
    try:
        await asyncio.gather(*(prepare_for_training(r, policy) for r in replicas))
        await sync_after_step(worker, policy)
        for _ in range(STEPS):
            outs = [await r.generate(PROMPTS, SAMPLING) for r in replicas]
            versions.append([out.weights_version for out in outs])
            await asyncio.gather(*(prepare_for_training(r, policy) for r in replicas))
            await _train_one_step(worker, tokenizer, outs[0].completions)
            await sync_after_step(worker, policy)
    finally:
        for backend in (worker, *replicas):
            await backend.shutdown()
    return versions


def _run_flow(server, tmp_path, ledger):
    async def flow():
        owner = await ArcticBackend.acreate(_client_config(server, tmp_path), state_ledger=ledger)
        try:
            return await _verl_run(owner, server.colocated), await owner.state_history()
        finally:
            await owner.shutdown()

    return asyncio.run(flow())


def _control_routes(server, since: int) -> list[str]:
    names = []
    for entry in server.requests()[since:]:
        route = entry["route"].lstrip("/")
        if route == "operation":
            route = entry["operation_type"]
        if route.startswith("job/") or route in (
            "status",  # job creation first reads the server's jobs (arctic_leftovers)
            "initialize",
            "destroy",
            "forward",
            "forward-backward",
            "step",
            "generate",
        ):
            continue
        detail = entry.get("mode") or entry.get("tags") or entry.get("level")
        names.append(f"{route}({detail})" if detail is not None else route)
    return names


def test_a_copy_of_the_state_per_process_is_the_bug(server, tmp_path):
    """What each object's own copy did (the handle carried a snapshot): colocated, the worker syncs
    into the sampler a replica put to sleep (the reference guard answers 409; the real server would
    sync silently); separate, every replica reports version 0 while the worker has synced 1."""
    if server.colocated:
        with pytest.raises(ArcticServerError) as caught:
            _run_flow(server, tmp_path, LocalStateLedger())
        assert caught.value.status == 409 and "sleeping sampler" in caught.value.body
    else:
        versions, _ = _run_flow(server, tmp_path, LocalStateLedger())
        assert versions == [[0, 0], [0, 0]]


def test_one_shared_record_gives_the_policy_sequence_and_fresh_versions(server, tmp_path, ray_runtime):
    since = len(server.requests())
    versions, history = _run_flow(server, tmp_path, RayStateLedger.start())
    # step 1 samples the start-up weights (0 optimizer steps), step 2 those synced after step 1
    assert versions == [[0, 0], [1, 1]]
    routes = _control_routes(server, since)
    if server.colocated:
        to_training = ["sleep-inference(1)", "wake-training"]
        sync = [
            "sleep-training(non_lp)",
            "wake-inference(['weights'])",
            "weight-sync",
            "wake-inference(['kv_cache'])",
            "reset-prefix-cache",
            "sleep-training(all)",
        ]
        # only the first replica to sleep finds the sampler awake (the second finds it asleep); at
        # start-up the trainer is awake already, after each step's sync it sleeps ("all")
        assert routes == ["sleep-inference(1)", *sync] + [*to_training, *sync] * STEPS, routes
        assert history[:2] == ["sleep_inference", "sleep_training(non_lp)"]
    else:
        assert routes == ["weight-sync", "reset-prefix-cache"] * (1 + STEPS)
        assert history == ["sync_weights", "step", "sync_weights", "step", "sync_weights"]

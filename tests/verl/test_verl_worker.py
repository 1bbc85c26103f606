"""The forwarder worker and the rollout server over a real (in-process) reference backend: verl's
jagged TensorDicts in, the backend's numbers out in verl's predict-next layout."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import torch

PROMPT_LENS = (5, 3, 7, 4)
RESPONSE_LENS = (4, 6, 2, 5)
MAX_PROMPT, MAX_RESPONSE = 8, 6


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("verl_worker")


@pytest.fixture(scope="module")
def arctic_cfg():
    from arctic_rl_core.config import ArcticRLConfig

    return ArcticRLConfig.from_dict(
        {
            "backend": {
                "kind": "reference",
                "reference": {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64},
            },
            "batch": {
                "prompts_per_step": 2,
                "rollouts_per_prompt": 2,
                "mini_batch_prompts": 1,
                "micro_batch_size_per_gpu": 1,
                "epochs": 2,
                "max_prompt_length": MAX_PROMPT,
                "max_response_length": MAX_RESPONSE,
            },
            "optimizer": {"lr": 1e-3},
            "placement": {"colocate": True},
            "loss": {"temperature": 0.9, "entropy_coeff": 0.01, "use_kl_loss": True, "kl_loss_coef": 0.1},
        }
    )


@pytest.fixture(scope="module")
def backend(arctic_cfg):
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    engine = ReferenceBackend(ReferenceEngineSettings.from_config(arctic_cfg))
    yield engine
    asyncio.run(engine.shutdown())


@pytest.fixture(scope="module")
def session(arctic_cfg, backend, run_dir):
    from adapter_verl.config import ArcticVerlSettings
    from adapter_verl.session import SessionInfo
    from arctic_rl_testbed.reference.model import save_model_dir

    model_dir = save_model_dir(run_dir / "model", arctic_cfg.backend.reference, arctic_cfg.determinism.seed)
    settings = ArcticVerlSettings(
        core=arctic_cfg.model_dump(mode="json", exclude_unset=True),
        model_path=str(model_dir),
        trace_dir=str(run_dir / "trace"),
    )
    return SessionInfo(handle=backend.handle(), settings=settings)


def _forwarder(session, port: int):
    """The rank-0 forwarder worker of a one-rank world, attached to `session`."""
    from adapter_verl.worker import ArcticActorRolloutRefWorker
    from omegaconf import OmegaConf

    env = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        w = ArcticActorRolloutRefWorker(
            config=OmegaConf.create({"model": {"path": session.settings.model_path}}),
            role="actor_rollout_ref",
        )
    w.attach(session)
    return w


@pytest.fixture(scope="module")
def worker(session):
    return _forwarder(session, 29555)


def _batch(vocab: int, **extra):
    """A batch as verl's agent loop stores it: jagged prompts/responses/masks per trajectory."""
    from verl.utils import tensordict_utils as tu

    g = torch.Generator().manual_seed(3)
    rows = []
    for p, r in zip(PROMPT_LENS, RESPONSE_LENS, strict=True):
        prompts = torch.randint(10, vocab, (p,), generator=g)
        responses = torch.randint(10, vocab, (r,), generator=g)
        rows.append(
            {
                "prompts": prompts,
                "responses": responses,
                "response_mask": torch.ones(r, dtype=torch.int64),
                "input_ids": torch.cat([prompts, responses]),
            }
        )
    data = tu.list_of_dict_to_tensordict(rows)
    tu.assign_non_tensor(data, **extra)
    return data


def _independent_logprobs(model, data, temperature: float) -> list[torch.Tensor]:
    """log p(response token j) straight from the HF model, one unpadded row at a time."""
    out = []
    with torch.no_grad():
        for p, r in zip(data["prompts"].unbind(0), data["responses"].unbind(0), strict=True):
            ids = torch.cat([p, r]).unsqueeze(0)
            logits = model(input_ids=ids).logits[0].float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp[len(p) - 1 : len(p) + len(r) - 1].gather(-1, r.unsqueeze(-1)).squeeze(-1))
    return out


def test_compute_log_prob_returns_verls_predict_next_layout(worker, backend):
    data = _batch(backend.vocab_size, calculate_entropy=True)
    out = worker.compute_log_prob(data)
    log_probs = out["log_probs"].unbind(0)
    entropy = out["entropy"].unbind(0)
    expected = _independent_logprobs(backend._trainer, data, temperature=0.9)
    for b, (p, r) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS, strict=True)):
        assert log_probs[b].shape == (p + r,) and entropy[b].shape == (p + r,)
        torch.testing.assert_close(log_probs[b][p - 1 : p + r - 1], expected[b], rtol=0, atol=2e-5)
        assert torch.all(log_probs[b][: p - 1] == 0) and log_probs[b][-1] == 0
        assert torch.all(entropy[b][p - 1 : p + r - 1] > 0)
    assert math.isnan(out["metrics"]["mfu"])


def test_verl_response_slicing_recovers_the_backend_values(worker, backend):
    from verl.workers.utils.padding import response_from_nested

    data = _batch(backend.vocab_size, calculate_entropy=False)
    out = worker.compute_log_prob(data)
    assert "entropy" not in out.keys()  # noqa: SIM118
    sliced = response_from_nested(out["log_probs"], data["response_mask"]).unbind(0)
    expected = _independent_logprobs(backend._trainer, data, temperature=0.9)
    for got, want in zip(sliced, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=2e-5)


def _train_batch(worker, backend):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    data = _batch(backend.vocab_size, calculate_entropy=True)
    old = response_from_nested(worker.compute_log_prob(data)["log_probs"], data["response_mask"])
    ref = response_from_nested(worker.compute_ref_log_prob(data)["log_probs"], data["response_mask"])
    adv = torch.nested.as_nested_tensor(
        [torch.full((r,), a) for r, a in zip(RESPONSE_LENS, (1.0, -1.0, 0.5, -0.5), strict=True)],
        layout=torch.jagged,
    )
    data["old_log_probs"], data["ref_log_prob"], data["advantages"] = old, ref, adv
    tu.assign_non_tensor(data, mini_batch_size=2, epochs=2, seed=42, dataloader_kwargs={"shuffle": False})
    return data


def test_update_actor_runs_verls_mini_batches_times_epochs(worker, backend, session):
    from adapter_verl.trace import read_trace
    from verl.workers.utils.padding import response_from_nested

    data = _train_batch(worker, backend)
    old, ref = data["old_log_probs"], data["ref_log_prob"]
    steps_before = backend.global_step
    metrics = worker.update_actor(data)["metrics"]
    # 4 rows / 2 per mini-batch x 2 epochs = 4 optimizer steps
    assert backend.global_step - steps_before == 4
    assert len(metrics["loss"]) == 4 and all(math.isfinite(x) for x in metrics["loss"])
    assert all(g > 0 for g in metrics["grad_norm"]) and metrics["lr"] == [1e-3] * 4
    assert "mfu" in metrics and len(metrics["mfu"]) == 4
    sent = [r for r in read_trace(session.settings.trace_dir) if r["op"] == "forward_backward"]
    assert [r["meta"]["global_batch_size"] for r in sent[-4:]] == [2, 2, 2, 2]
    # the policy moved away from the reference model, which stayed put
    probe = _batch(backend.vocab_size, calculate_entropy=False)
    after = response_from_nested(worker.compute_log_prob(probe)["log_probs"], probe["response_mask"])
    ref_after = response_from_nested(worker.compute_ref_log_prob(probe)["log_probs"], probe["response_mask"])
    assert not torch.allclose(after.values(), old.values())
    torch.testing.assert_close(ref_after.values(), ref.values(), rtol=0, atol=0)


def test_over_text_a_turn_the_server_read_otherwise_is_not_trained(session, backend):
    """Over a text-only sampler the forwarder checks each row's sampled turns (runs of mask 1): a turn
    whose preceding ids the server re-spells (here: after a first turn sampled as one token per
    character) leaves the loss with every later turn of its row; the step logs the share."""
    from dataclasses import replace

    from adapter_verl.trace import read_trace
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    tokenizer = backend.tokenizer
    text_worker = _forwarder(replace(session, handle=_TextOnlyHandle(backend)), 29557)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    # within the module's MAX_PROMPT / MAX_RESPONSE: a chat-shaped prompt, a two-letter first turn, a
    # one-token observation between special tokens, a one-token answer
    prompt = encode("<|im_start|>Q?<|im_end|><|im_start|>")
    observation = encode("<|im_end|><|im_start|>")
    spelled = [t for ch in "ab" for t in encode(ch)]  # sampled one token per character
    assert len(spelled) == 2 and len(encode("ab")) == 1
    rows = []
    for first in (spelled, encode("ab")):
        response = first + observation + encode("3")
        rows.append((prompt, response, [1] * len(first) + [0] * len(observation) + [1]))
    data = tu.list_of_dict_to_tensordict(
        [
            {
                "prompts": torch.tensor(p),
                "responses": torch.tensor(r),
                "response_mask": torch.tensor(m),
                "input_ids": torch.tensor(p + r),
            }
            for p, r, m in rows
        ]
    )
    tu.assign_non_tensor(data, calculate_entropy=False)
    old = response_from_nested(text_worker.compute_log_prob(data)["log_probs"], data["response_mask"])
    data["old_log_probs"], data["ref_log_prob"] = old, old
    data["advantages"] = torch.nested.as_nested_tensor(
        [torch.full((len(r),), 1.0) for _, r, _ in rows], layout=torch.jagged
    )
    tu.assign_non_tensor(data, mini_batch_size=2, epochs=1, seed=42, dataloader_kwargs={"shuffle": False})
    text_worker.update_actor(data)
    (sent,) = [r for r in read_trace(session.settings.trace_dir) if r["op"] == "forward_backward"][-1:]
    trained = len(spelled) + sum(rows[1][2])
    assert sent["batch"]["response_mask"]["sum"] == trained  # row 1's second turn left out
    assert text_worker.sync_metrics()["token_drift/turns"] == 0.25  # 1 of 4 sampled turns


def test_checkpoint_round_trip_through_verl_paths(worker, backend, run_dir):
    probe = _batch(backend.vocab_size, calculate_entropy=False)
    saved = worker.compute_log_prob(probe)["log_probs"].values()
    path = run_dir / "ckpt" / "global_step_3" / "actor"
    worker.save_checkpoint(str(path), None, global_step=3)
    saved_step = backend.global_step
    worker.update_actor(_train_batch(worker, backend))
    assert backend.global_step == saved_step + 4
    worker.load_checkpoint(str(path))
    assert backend.global_step == saved_step
    torch.testing.assert_close(worker.compute_log_prob(probe)["log_probs"].values(), saved, rtol=0, atol=0)
    with pytest.raises(ValueError, match="global_step_<n>"):
        worker.load_checkpoint(str(run_dir / "elsewhere"))
    # verl's max_ckpt_to_keep (trainer.max_actor_ckpt_to_keep) prunes the backend's checkpoints:
    # they share one folder, checkpoint-<n>, the server keeps the newest N
    for step in (4, 5):
        worker.save_checkpoint(str(run_dir / "ckpt" / f"global_step_{step}" / "actor"), None, step, 2)
    backend_root = run_dir / "ckpt" / "arctic_backend"
    assert sorted(p.name for p in backend_root.iterdir() if p.is_dir()) == ["checkpoint-4", "checkpoint-5"]
    worker.load_checkpoint(str(run_dir / "ckpt" / "global_step_5" / "actor"))
    assert backend.global_step == saved_step
    with pytest.raises(FileNotFoundError, match="checkpoint-3"):  # pruned: beyond max_ckpt_to_keep=2
        worker.load_checkpoint(str(path))


def test_rollout_server_module_imports_no_verl_and_its_results_arrive_as_verls_token_output() -> None:
    # The server actor's process imports only adapter_verl.rollout_server (no verl, no torch: 5.5 s of CPU
    # at start-up); what its generate returns is rebuilt as verl's TokenOutput where it is unpickled.
    import pickle
    import subprocess
    import sys

    from adapter_verl.rollout_server import RolloutTokens
    from verl.workers.rollout.replica import TokenOutput

    code = "import sys, adapter_verl.rollout_server; print(sorted(m for m in ('verl', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    tokens = RolloutTokens(
        token_ids=[5, 6], log_probs=[-0.5, -1.0], stop_reason="completed", extra_fields={"global_steps": 3}
    )
    arrived = pickle.loads(pickle.dumps(tokens))  # as Ray sends an actor's return value
    assert type(arrived) is TokenOutput
    assert arrived == TokenOutput(
        token_ids=[5, 6], log_probs=[-0.5, -1.0], stop_reason="completed", extra_fields={"global_steps": 3}
    )
    assert type(tokens.as_verl_if_loaded()) is TokenOutput  # in a process with verl loaded: at once


def test_rollout_server_reports_weights_version_and_defaults_max_tokens(session, backend, worker):
    from adapter_verl.rollout_server import ArcticRolloutServer
    from adapter_verl.trace import read_trace

    server = ArcticRolloutServer(replica_rank=0, response_length=MAX_RESPONSE)
    server.attach(session)

    async def scenario():
        await backend.wake_inference(None)
        first = await server.generate(
            "r1", prompt_ids=[11, 12, 13], sampling_params={"temperature": 1.0, "top_k": 0}
        )
        version_before = (await backend.state()).weights_version
        await asyncio.to_thread(worker.update_actor, _train_batch(worker, backend))  # the trainer moves on
        await backend.sync_weights()
        await backend.reset_prefix_cache()
        second = await server.generate(
            "r2", prompt_ids=[11, 12, 13], sampling_params={"temperature": 1.0, "logprobs": True}
        )
        state = await backend.state()
        # verl's "sampling is over": the devices go to training through the core policy
        await server.sleep()
        after_sleep = await backend.state()
        await server.wake_up()
        after_wake = await backend.state()
        assert (after_sleep.inference.value, after_sleep.training.value) == ("asleep", "awake")
        assert after_wake.inference.value == "awake" and after_wake.weights_version == state.weights_version
        return first, version_before, second, state.weights_version, state.trainer_version

    first, v0, second, v1, trainer_version = asyncio.run(scenario())
    from verl.workers.rollout.replica import TokenOutput

    assert type(first) is TokenOutput and type(second) is TokenOutput  # verl is loaded in this process
    assert first.extra_fields["global_steps"] == v0
    assert second.extra_fields["global_steps"] == v1 == trainer_version and v1 > v0
    assert 1 <= len(first.token_ids) <= MAX_RESPONSE and first.log_probs is None
    assert second.log_probs is not None and len(second.log_probs) == len(second.token_ids)
    generated = [r for r in read_trace(session.settings.trace_dir) if r["op"] == "generate"]
    assert [r["max_tokens"] for r in generated[-2:]] == [MAX_RESPONSE, MAX_RESPONSE]
    assert [r["weights_version"] for r in generated[-2:]] == [v0, v1]


def test_sampling_params_the_backend_cannot_honour_are_refused():
    from adapter_verl.rollout_server import sampling_params_from_verl

    params = sampling_params_from_verl({"temperature": 0.5, "top_p": 0.9, "top_k": 0, "max_tokens": 3}, 99)
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k) == (3, 0.5, 0.9, -1)
    with pytest.raises(ValueError, match=r"repetition_penalty=1\.1"):
        sampling_params_from_verl({"repetition_penalty": 1.1}, 8)
    with pytest.raises(ValueError, match=r"\['min_p'\]"):
        sampling_params_from_verl({"min_p": 0.1}, 8)


def test_max_tokens_follow_verls_vllm_server_over_the_turns_of_a_conversation():
    """verl's vLLM server: unset, min(response_length, prompt_length + response_length - prompt);
    always within [1, max_model_len - prompt]; no room at all is refused. A multi-turn loop relies on it:
    its later turns get what is left of the conversation's budget."""
    from adapter_verl.rollout_server import TokenBudget, sampling_params_from_verl

    budget = TokenBudget(response_length=100, prompt_length=50)  # max_model_len: 150
    assert [budget.max_tokens(n, None) for n in (10, 50, 70, 149)] == [100, 100, 80, 1]
    assert budget.max_tokens(120, 64) == 30  # an explicit value is clamped to the room left
    with pytest.raises(ValueError, match=r"prompt of 150 tokens leaves no room.*max_model_len=150"):
        budget.max_tokens(150, None)
    assert TokenBudget(100, 50, max_model_len=400).max_tokens(120, 64) == 64
    assert TokenBudget(100).max_tokens(10_000, None) == 100  # no prompt budget known: the response length
    params = sampling_params_from_verl({"stop_token_ids": [7, 3], "logprobs": True}, budget, prompt_len=60)
    assert (params.max_tokens, params.stop_token_ids, params.logprobs) == (90, (3, 7), True)
    assert sampling_params_from_verl({"stop": "</sql>"}, budget).stop == ("</sql>",)
    assert sampling_params_from_verl({"stop": ["</sql>", "</solution>"]}, budget).stop == (
        "</sql>",
        "</solution>",
    )
    with pytest.raises(ValueError, match="stop="):
        sampling_params_from_verl({"stop": [""]}, budget)


async def _sampler_on_trained_weights(backend, arctic_cfg) -> None:
    """What verl's update_weights does before rollouts: the core sync (colocated, the sampler sleeps
    at level 2 while training, so its weights must come back from the trainer)."""
    from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step

    await sync_after_step(backend, WeightSyncPolicy.from_config(arctic_cfg))


class _TextOnlyHandle:
    """A handle whose backend takes text prompts only (as ArcticBackend on-prem) and, with
    `misreport`, claims to have read one token more than it did (a server with another tokenizer)."""

    def __init__(self, backend, *, misreport: bool = False) -> None:
        self.backend, self.misreport = backend, misreport

    def connect(self):
        from dataclasses import replace

        from arctic_rl_core.backends.forwarding import ForwardingBackend
        from arctic_rl_core.backends.protocol import GenerateOutput

        misreport = self.misreport

        class TextOnly(ForwardingBackend):
            @property
            def accepts_token_ids(self) -> bool:
                return False

            async def generate(self, prompts, params):
                assert all(isinstance(p, str) for p in prompts), "a text-only server got token ids"
                out = await self.target.generate(prompts, params)
                if not misreport:
                    return out
                completions = [replace(c, prompt_token_ids=(*c.prompt_token_ids, 0)) for c in out.completions]
                return GenerateOutput(completions, out.weights_version)

        return TextOnly(self.backend)


def test_rollout_server_sends_text_to_text_only_servers_and_records_what_they_read(
    session, backend, arctic_cfg
):
    """Over text (the on-prem server) each turn is sent as the decoded ids; a turn whose ids the server
    re-spells is sampled from the server's ids and traced as not exact (the forwarder then leaves it
    untrained); a server that reads other tokens than the local tokenizer makes of the text is refused."""
    from dataclasses import replace

    from adapter_verl.rollout_server import ArcticRolloutServer
    from adapter_verl.trace import read_trace
    from arctic_rl_core.multi_turn.turn_sampler import TokenizerMismatchError

    server = ArcticRolloutServer(replica_rank=1, response_length=MAX_RESPONSE)
    server.attach(replace(session, handle=_TextOnlyHandle(backend)))
    assert server.text_prompts
    tokenizer = backend.tokenizer
    prompt_ids = tokenizer.encode("SELECT name FROM users")
    split = [t for text in "SELECT" for t in tokenizer.encode(text)]  # no tokenizer's own spelling
    assert tokenizer.encode(tokenizer.decode(split)) != split

    async def scenario():
        await _sampler_on_trained_weights(backend, arctic_cfg)
        exact = await server.generate("t1", prompt_ids=prompt_ids, sampling_params={"max_tokens": 2})
        respelled = await server.generate("t2", prompt_ids=split, sampling_params={"max_tokens": 2})
        lying = ArcticRolloutServer(replica_rank=4, response_length=MAX_RESPONSE)
        lying.attach(replace(session, handle=_TextOnlyHandle(backend, misreport=True)))
        with pytest.raises(TokenizerMismatchError, match="tokenizer must be the served model's"):
            await lying.generate("t3", prompt_ids=prompt_ids, sampling_params={"max_tokens": 2})
        return exact, respelled

    exact, respelled = asyncio.run(scenario())
    assert 1 <= len(exact.token_ids) <= 2 and 1 <= len(respelled.token_ids) <= 2
    traced = {r["request_id"]: r for r in read_trace(session.settings.trace_dir) if r["op"] == "generate"}
    assert (traced["t1"]["sent_as"], traced["t1"]["exact"]) == ("text", True)
    assert (traced["t2"]["sent_as"], traced["t2"]["exact"]) == ("text", False)


def test_concurrent_requests_share_backend_calls_without_mixing_results(session, backend, arctic_cfg):
    from adapter_verl.rollout_server import ArcticRolloutServer

    prompts = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32], [41, 42, 43, 44], [51]]
    greedy = {"temperature": 0.0, "max_tokens": 4}

    async def together(server):
        await _sampler_on_trained_weights(backend, arctic_cfg)
        return await asyncio.gather(
            *(server.generate(f"c{i}", prompt_ids=p, sampling_params=greedy) for i, p in enumerate(prompts))
        )

    async def one_by_one(server):
        return [
            await server.generate(f"s{i}", prompt_ids=p, sampling_params=greedy)
            for i, p in enumerate(prompts)
        ]

    batched_server = ArcticRolloutServer(replica_rank=2, response_length=MAX_RESPONSE, max_num_seqs=2)
    batched_server.attach(session)
    batched = asyncio.run(together(batched_server))
    queue = asyncio.run(batched_server.take_sampler_queue_stats())
    # max_num_seqs=2 caps each backend call; the reference sampler serves one call at a time, so the
    # requests that arrive meanwhile go together when it returns: 2 + 2 + 1
    assert (queue.requests, queue.calls, queue.in_flight_max) == (5, 3, 2)

    single_server = ArcticRolloutServer(replica_rank=3, response_length=MAX_RESPONSE)
    single_server.attach(session)
    alone = asyncio.run(one_by_one(single_server))
    queue = asyncio.run(single_server.take_sampler_queue_stats())
    assert (queue.requests, queue.calls, queue.in_flight_max) == (5, 5, 1)
    assert [o.token_ids for o in batched] == [o.token_ids for o in alone]


def test_rollout_correction_weights_reach_the_wire_at_response_positions():
    """verl's `algorithm.rollout_correction.rollout_is` writes per-token `rollout_is_weights` rows;
    the forwarder carries them into the one wire payload, where the server loss reads them."""
    from adapter_verl.worker import samples_from_tensordict
    from arctic_rl_core.wire import PayloadSpec, build_train_payload

    data = _batch(64)
    jagged = [torch.linspace(0.5, 1.5, r) for r in RESPONSE_LENS]
    for name in ("old_log_probs", "advantages"):
        data[name] = torch.nested.as_nested_tensor(
            [torch.zeros(r) for r in RESPONSE_LENS], layout=torch.jagged
        )
    data["rollout_is_weights"] = torch.nested.as_nested_tensor(jagged, layout=torch.jagged)
    samples = samples_from_tensordict(data, with_training_fields=True)
    assert [list(s.rollout_is_weights) for s in samples] == [w.tolist() for w in jagged]
    spec = PayloadSpec(
        pad_token_id=0, max_prompt_len=MAX_PROMPT, max_response_len=MAX_RESPONSE, rollout_n=2, temperature=1.0
    )
    batch = build_train_payload(samples, spec).batch
    weights = torch.as_tensor(batch["rollout_is_weights"])
    for b, (r, w) in enumerate(zip(RESPONSE_LENS, jagged, strict=True)):
        torch.testing.assert_close(weights[b, MAX_PROMPT : MAX_PROMPT + r], w, rtol=0, atol=0)


def test_without_a_server_forward_old_log_probs_are_the_samplers(worker, backend):
    """Cortex: verl's old-log-prob pass returns each row's rollout log-probs in verl's predict-next
    layout, and as entropy their sampled-token estimate -log p, with no backend call."""
    from arctic_rl_core.backends.forwarding import ForwardingBackend
    from verl.workers.utils.padding import response_from_nested

    class NoForward(ForwardingBackend):
        serves_forward = False

        async def forward(self, payload, *, reference_model=False):
            raise AssertionError("forward() called on a backend without forward")

    g = torch.Generator().manual_seed(5)
    rollout = [-torch.rand(r, generator=g) * 3 for r in RESPONSE_LENS]
    data = _batch(backend.vocab_size, calculate_entropy=True)
    data["rollout_log_probs"] = torch.nested.as_nested_tensor(rollout, layout=torch.jagged)
    original, worker._backend = worker._backend, NoForward(worker._backend)
    try:
        out = worker.compute_log_prob(data)
        without = _batch(backend.vocab_size, calculate_entropy=False)
        with pytest.raises(RuntimeError, match="no rollout_log_probs: on a backend without forward"):
            worker.compute_log_prob(without)
    finally:
        worker._backend = original
    sliced = response_from_nested(out["log_probs"], data["response_mask"]).unbind(0)
    entropy = response_from_nested(out["entropy"], data["response_mask"]).unbind(0)
    for b, (p, r) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS, strict=True)):
        assert out["log_probs"].unbind(0)[b].shape == (p + r,)
        torch.testing.assert_close(sliced[b], rollout[b], rtol=0, atol=0)
        torch.testing.assert_close(entropy[b], -rollout[b], rtol=0, atol=0)


def _verl_trainer(worker, checkpoints, dataloader, global_steps: int):
    """adapter_verl's `ArcticTrainer` holding what verl 0.9.1's own `_save_checkpoint` and
    `_load_checkpoint` read: the config's checkpoint fields, the dataloader, and as its actor worker group
    the rank-0 forwarder (a one-rank group's ONE_TO_ALL dispatch calls it with the same arguments); its
    `__init__` (Ray resource pools, workers, datasets) is skipped."""
    from adapter_verl.trainer import ArcticTrainer
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    trainer = object.__new__(ArcticTrainer)
    trainer.config = OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(checkpoints),
                "default_hdfs_dir": None,
                "resume_mode": "auto",
                "resume_from_path": None,
                "del_local_ckpt_after_load": False,
                "max_actor_ckpt_to_keep": None,
            },
            "actor_rollout_ref": {"actor": {"checkpoint": {}}},
        }
    )
    trainer.checkpoint_callback = build_checkpoint_callback(trainer.config)
    trainer.use_critic = False
    trainer.actor_rollout_wg = worker
    trainer.train_dataloader = dataloader
    trainer.global_steps = global_steps
    return trainer


def test_a_refused_write_in_the_backends_save_fails_verls_step_and_the_resume_takes_the_last_whole_one(
    worker, backend, run_dir
):
    """verl's save path to the shared guard (`step_save`): verl 0.9.1's `_save_checkpoint` through the
    adapter's trainer, the forwarder worker's save and the reference engine, whose write the kernel
    refuses at step 2 (`write_limit`: a full disk's EFBIG), then verl's own data.pt write refused at step 3.
    The run says which save failed and why, keeps no global_step_2 / 3, and verl's own resume
    (`resume_mode=auto`) loads step 1's checkpoint and dataloader, never the backend's newer checkpoint-3."""
    from arctic_rl_core.checkpoint_manifest import BackendSaveFailed, StepSaveFailed
    from arctic_rl_testbed.reference.checkpoint import CheckpointWriteError
    from torchdata.stateful_dataloader import StatefulDataLoader
    from write_limit import file_size_limit

    # verl saves after update_actor, with the devices on training; an earlier test of this module ends
    # in the colocated sync's sleep-training(all), so put the backend where verl's step leaves it
    asyncio.run(backend.wake_training())
    checkpoints = run_dir / "refused"
    dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    batches = iter(dataloader)
    assert next(batches).tolist() == [0, 1]
    trainer = _verl_trainer(worker, checkpoints, dataloader, global_steps=1)
    trainer._save_checkpoint()
    step_1 = backend.global_step
    assert next(batches).tolist() == [2, 3]
    worker.update_actor(_train_batch(worker, backend))
    assert backend.global_step > step_1
    trainer.global_steps = 2
    with pytest.raises(StepSaveFailed) as caught, file_size_limit(64):  # the engine's save writes first
        trainer._save_checkpoint()
    failed = caught.value
    assert isinstance(failed.cause, BackendSaveFailed)
    assert isinstance(failed.cause.__cause__, CheckpointWriteError)  # the engine's own guard kept nothing
    backend_root = checkpoints / "arctic_backend"
    assert str(failed).startswith(
        f"saving the checkpoint {checkpoints / 'global_step_2'} failed: BackendSaveFailed: the backend's save "
        f"of {backend_root / 'checkpoint-2'} failed (CheckpointWriteError: "
    )
    assert not (checkpoints / "global_step_2").exists()
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert sorted(p.name for p in backend_root.iterdir()) == ["checkpoint-1", "latest"]
    assert (backend_root / "latest").read_text() == "1"
    # step 3: the backend's save is whole, verl's own data.pt write is refused: its step folder, begun by
    # verl, is removed, and the backend's checkpoint-3 is left unnamed by any framework step
    real_save = torch.save

    def data_refused(obj, f, *args, **kwargs):
        if not str(f).endswith(str(Path("global_step_3") / "data.pt")):
            return real_save(obj, f, *args, **kwargs)
        with file_size_limit(64):
            return real_save(obj, f, *args, **kwargs)

    trainer.global_steps = 3
    with pytest.MonkeyPatch.context() as patch, pytest.raises(StepSaveFailed) as caught:
        patch.setattr(torch, "save", data_refused)
        trainer._save_checkpoint()
    assert str(caught.value).startswith(
        f"saving the checkpoint {checkpoints / 'global_step_3'} failed: RuntimeError"
    )
    assert not (checkpoints / "global_step_3").exists() and (backend_root / "checkpoint-3").is_dir()
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "1"

    resumed_loader = StatefulDataLoader(list(range(8)), batch_size=2)
    resumed = _verl_trainer(worker, checkpoints, resumed_loader, global_steps=0)
    resumed._load_checkpoint()
    assert resumed.global_steps == 1 and backend.global_step == step_1
    assert next(iter(resumed_loader)).tolist() == [2, 3]  # the dataloader where step 1 left it

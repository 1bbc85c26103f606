"""Token in / token out through any backend (`arctic_rl_core.multi_turn`): ids go as ids where the
backend takes them; to a text-only server (the Arctic on-prem server) they go as text and each turn
records the ids the server conditioned on, checked against what it reports. The wire test drives the
real arctic-platform 0.1.4 client against `arctic-rl serve --reference`, whose request log is the
sampler's own record of what it conditioned on and drew."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from arctic_rl_core import dispatch
from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.backends.protocol import FinishReason, SamplingParams
from arctic_rl_core.multi_turn.prompt_text import PromptText
from arctic_rl_core.multi_turn.trajectory_fidelity import trajectory_fidelity
from arctic_rl_core.multi_turn.turn_sampler import SampledTurn, TokenizerMismatchError, TurnSampler
from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
from arctic_rl_testbed.reference.tokenizer import build_tokenizer

TINY = dict(num_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1)
PARAMS = SamplingParams(max_tokens=5, temperature=1.0, logprobs=True)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def engine():
    backend = ReferenceBackend(ReferenceEngineSettings(seed=3, num_threads=1, model=TINY))
    yield backend
    dispatch.run(backend.shutdown())


def chat_ids(tokenizer, question: str) -> list[int]:
    messages = [{"role": "user", "content": question}]
    return list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def non_canonical(tokenizer, word: str) -> list[int]:
    """`word` spelt one character per token: ids the tokenizer never makes of its text."""
    ids = [tokenizer.encode(c, add_special_tokens=False)[0] for c in word]
    assert tuple(tokenizer.encode(word, add_special_tokens=False)) != tuple(ids)
    return ids


class TextOnly(ForwardingBackend):
    """The in-process engine as the on-prem server answers: text prompts only, no prompt ids echoed
    (only `prompt_len`); `prompt_len_offset` plays a server whose tokenizer counts differently."""

    def __init__(self, target, prompt_len_offset: int = 0):
        super().__init__(target)
        self.offset = prompt_len_offset
        self.sent: list = []

    @property
    def accepts_token_ids(self) -> bool:
        return False

    async def generate(self, prompts, params):
        assert all(isinstance(p, str) for p in prompts)
        self.sent.extend(prompts)
        out = await self.target.generate(prompts, params)
        completions = [
            dataclasses.replace(c, prompt_token_ids=None, prompt_len=c.prompt_len + self.offset)
            for c in out.completions
        ]
        return dataclasses.replace(out, completions=completions)


def test_prompt_text_round_trips_a_chat_prompt_and_names_what_a_sampled_spelling_becomes(tokenizer):
    text = PromptText(tokenizer)
    ids = chat_ids(tokenizer, "How many movies?")
    assert text.server_ids(text.to_text(ids)) == tuple(ids)
    spelt = ids + non_canonical(tokenizer, "select")
    seen = text.server_ids(text.to_text(spelt))
    assert seen[: len(ids)] == tuple(ids) and seen != tuple(spelt)  # the server merges the spelling
    assert text.to_text(seen) == text.to_text(spelt)  # the same text either way


def test_prompt_text_drops_the_bos_the_server_adds_itself(tokenizer):
    from tokenizers.processors import TemplateProcessing

    bos_adding = build_tokenizer()
    im_start = bos_adding.convert_tokens_to_ids("<|im_start|>")
    bos_adding.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", im_start)]
    )
    text = PromptText(bos_adding)
    assert text.added_prefix == (im_start,) and text.added_suffix == ()
    ids = [im_start, *bos_adding.encode("select name", add_special_tokens=False)]
    assert not text.to_text(ids).startswith("<|im_start|>")
    assert text.server_ids(text.to_text(ids)) == tuple(ids)  # not a doubled BOS


def test_response_text_keeps_the_stop_string_and_drops_text_past_it(tokenizer):
    text = PromptText(tokenizer)
    ids = tokenizer.encode("<think>x</think>\n<answer>SELECT 1</answer> trailing", add_special_tokens=False)
    ids = [*ids, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert text.response_text(ids, ("</answer>",)) == "<think>x</think>\n<answer>SELECT 1</answer>"
    assert (
        text.response_text(ids, ()) == "<think>x</think>\n<answer>SELECT 1</answer> trailing"
    )  # EOS skipped
    assert text.response_text(ids, ("</think>", "</answer>")).endswith("</think>")  # the first one found


def test_token_id_backend_gets_the_ids_and_echoes_them(engine, tokenizer):
    sampler = TurnSampler(engine, tokenizer)
    prompts = [chat_ids(tokenizer, "one"), chat_ids(tokenizer, "two") + non_canonical(tokenizer, "select")]
    turns = asyncio.run(sampler.sample(prompts, PARAMS))
    assert [t.sent_as for t in turns] == ["token_ids", "token_ids"]
    assert all(t.exact for t in turns)  # ids in: even a spelling the tokenizer never makes is kept
    for turn, prompt in zip(turns, prompts, strict=True):
        assert turn.context_ids == tuple(prompt)
        assert len(turn.logprobs) == len(turn.token_ids) >= 1
        assert turn.text == tokenizer.decode(list(turn.token_ids), skip_special_tokens=True)


def test_text_only_backend_is_exact_for_canonical_ids_and_records_drift_for_the_rest(engine, tokenizer):
    server = TextOnly(engine)
    sampler = TurnSampler(server, tokenizer)
    canonical = chat_ids(tokenizer, "one")
    spelt = canonical + non_canonical(tokenizer, "select")
    first, second = asyncio.run(sampler.sample([canonical, spelt], PARAMS))
    assert (first.sent_as, first.exact, first.context_ids) == ("text", True, tuple(canonical))
    assert not second.exact and second.prompt_ids == tuple(spelt)
    assert second.context_ids == tuple(tokenizer.encode(server.sent[1], add_special_tokens=True))
    assert len(second.context_ids) < len(spelt)  # what the sampler really read: the merged spelling


def test_a_server_that_counts_other_tokens_is_refused(engine, tokenizer):
    sampler = TurnSampler(TextOnly(engine, prompt_len_offset=1), tokenizer)
    with pytest.raises(TokenizerMismatchError, match="the adapter's tokenizer must be the served model's"):
        asyncio.run(sampler.sample([chat_ids(tokenizer, "one")], PARAMS))


def _turn(prompt, context, tokens=(7,)):
    return SampledTurn(tuple(prompt), tuple(context), tuple(tokens), None, "", FinishReason.STOP, 0, "text")


def test_trajectory_fidelity_repairs_a_prompt_and_stops_at_the_first_drifted_turn():
    exact = [_turn([1, 2], [1, 2]), _turn([1, 2, 7, 9], [1, 2, 7, 9])]
    assert trajectory_fidelity(exact) == trajectory_fidelity(exact).__class__((1, 2), False, 2, 2)
    # only the prompt was tokenised differently: the row's prompt becomes the server's, every turn exact
    repaired = trajectory_fidelity([_turn([1, 2], [3]), _turn([1, 2, 7, 9], [3, 7, 9])])
    assert (repaired.prompt_ids, repaired.prompt_repaired, repaired.exact_turns) == ((3,), True, 2)
    # turn 1 read a merged spelling of turn 0's tokens: from turn 1 on the row is not what was read
    drifted = trajectory_fidelity(
        [_turn([1, 2], [1, 2]), _turn([1, 2, 7, 9], [1, 2, 8]), _turn([1, 2, 7, 9, 4], [1, 2, 7, 9, 4])]
    )
    assert (drifted.exact_turns, drifted.turns, drifted.drifted) == (1, 3, True)
    with pytest.raises(ValueError, match="does not extend"):
        trajectory_fidelity([_turn([1, 2], [1, 2]), _turn([5, 2, 7], [5, 2, 7])])


def test_wire_turns_through_the_real_client_match_the_servers_record(wire, tokenizer, tmp_path):
    """ArcticBackend + the 0.1.4 client: text goes out, `prompt_len` verifies each turn, and the
    server's own request log (a digest of the ids it conditioned on and drew, per rollout) names
    exactly the ids the turn records."""
    from arctic_rl_core.backends.arctic import ArcticBackend
    from arctic_rl_testbed.reference.http_server import rollout_digest

    backend = ArcticBackend.from_config(
        wire.core_config(
            f"checkpoint.path={tmp_path}", "batch.prompts_per_step=1", "batch.rollouts_per_prompt=1"
        )
    )
    try:
        assert backend.accepts_token_ids is False
        sampler = TurnSampler(backend, tokenizer)
        canonical = chat_ids(tokenizer, "How many movies?")
        spelt = canonical + non_canonical(tokenizer, "select")
        mark = wire.request_count()
        turns = dispatch.run(sampler.sample([canonical, spelt], PARAMS))
        generate = [r for r in wire.requests(mark) if r["route"] == "/generate"]
        assert len(generate) == 1 and generate[0]["status"] == 200
        assert generate[0]["rollouts"] == [rollout_digest(t.context_ids, t.token_ids) for t in turns]
        assert [t.exact for t in turns] == [True, False]
        assert turns[0].context_ids == tuple(canonical)
        assert all(t.logprobs is not None and len(t.logprobs) == len(t.token_ids) for t in turns)
        # a second turn extends the first with what it sampled: exact when that re-tokenises to itself
        follow = list(canonical) + list(turns[0].token_ids)
        again = dispatch.run(sampler.sample([follow], PARAMS))[0]
        local = PromptText(tokenizer)
        assert again.exact == (local.server_ids(local.to_text(follow)) == tuple(follow))
    finally:
        dispatch.run(backend.shutdown())

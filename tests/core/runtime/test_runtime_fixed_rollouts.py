"""`arctic-rl serve --reference --fixed-rollouts FILE`: `/generate` serves FILE's completions in order
of arrival per prompt, through the real arctic-platform 0.1.4 client (`ArcticBackend`, HTTP, DSSST1),
with the sampling route's checks (the state guard, sampling params) and result shape; what it cannot
serve honestly is refused with the reason. The parity suite's wire runs stand on this
(tests/skyrl/test_parity_skyrl_wire.py, tests/verl/test_parity_verl_wire.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from arctic_rl_core import dispatch
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.arctic_errors import ArcticCallError
from arctic_rl_core.backends.protocol import FinishReason, SamplingParams
from arctic_rl_testbed.reference.fixed_rollouts import FORMAT, FixedRollouts, FixedRolloutsError
from wire_server import serve_reference

EOS = 2  # the bundled reference tokenizer's eos token id (checked below)


def _document():
    return {
        "format": FORMAT,
        "prompts": [
            {"contains": "colour", "completions": [{"token_ids": [40, 41, EOS]}, {"token_ids": [50, 51, 52, 53]}]},
            {"contains": "three", "completions": [{"token_ids": [60, EOS]}]},
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server with the file; the calls of the test below in one client session."""
    root = tmp_path_factory.mktemp("fixed")
    path = root / "fixed.json"
    path.write_text(json.dumps(_document()))
    with serve_reference(
        root / "server",
        args=["--fixed-rollouts", str(path), "--request-log", str(root / "requests.jsonl")],
        file_root=root,
    ) as server:
        backend = ArcticBackend.from_config(
            server.core_config(f"checkpoint.path={root / 'ckpt'}", "zorro.enable=false")
        )
        try:
            yield server, backend
        finally:
            dispatch.run(backend.shutdown())


def _generate(backend, prompts, **params):
    return dispatch.run(backend.generate(prompts, SamplingParams(**{"max_tokens": 8, **params})))


def test_completions_are_served_per_prompt_in_order_of_arrival_with_the_sampling_checks(served):
    server, backend = served
    from arctic_rl_testbed.reference.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()  # the one the server's reference model uses
    assert tokenizer.eos_token_id == EOS
    first = _generate(backend, ["Name a colour:", "Count to three:"])
    assert [list(c.token_ids) for c in first.completions] == [[40, 41, EOS], [60, EOS]]
    assert [c.finish_reason for c in first.completions] == [FinishReason.STOP, FinishReason.STOP]
    assert first.completions[0].text == tokenizer.decode([40, 41], skip_special_tokens=True) != ""
    # the second "colour" request gets the second completion, cut at max_tokens, with the log-probs
    # the sampler's weights give those tokens (teacher-forced) when asked for them
    second = _generate(backend, ["Another colour?"], max_tokens=3, logprobs=True)
    (completion,) = second.completions
    assert list(completion.token_ids) == [50, 51, 52] and completion.finish_reason == FinishReason.LENGTH
    assert len(completion.logprobs) == 3 and all(-30 < lp < 0 for lp in completion.logprobs)
    # one request more than the file plans is refused, and counts nothing
    with pytest.raises(ArcticCallError, match="asked for completion 2 but the file has 1"):
        _generate(backend, ["Count to three:"])
    with pytest.raises(ArcticCallError, match="matches no entry"):
        _generate(backend, ["Say hello"])
    # the server's state guard still applies: no generate while the sampler sleeps (put to sleep
    # behind the client's back, so that the server, not the client's own check, refuses)
    (sampling,) = [job for job, info in server.jobs().items() if info["job_type"] == "sampling"]
    server.post(f"/sleep-inference?job_id={sampling}", {"level": 1})
    with pytest.raises(ArcticCallError, match="generate while inference is asleep"):
        _generate(backend, ["Count to three:"])
    server.post(f"/wake-inference?job_id={sampling}")
    log = [e for e in server.requests() if e["route"] == "/generate"]
    assert [e["status"] for e in log] == [200, 200, 400, 400, 409]
    assert log[0]["fixed_rollouts"] is True and len(log[0]["rollouts"]) == 2


def test_a_malformed_file_is_refused_before_the_server_starts(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"format": FORMAT, "prompts": [{"contains": "x", "completions": [{"token_ids": []}]}]})
    )
    out = subprocess.run(
        [sys.executable, "-m", "arctic_rl_core.cli.main", "serve", "--reference", "--port", "0",
         "--fixed-rollouts", str(bad)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "prompts[0].completions[0].token_ids must be a non-empty list" in out.stderr


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"format": "other"}, "expected 'arctic-rl-fixed-rollouts/1'"),
        ({"format": FORMAT, "prompts": []}, "no prompts"),
        ({"format": FORMAT, "prompts": [{"contains": "a", "completions": []}]}, "has no completions"),
        (
            {"format": FORMAT, "prompts": [{"contains": "a", "completions": [{"token_ids": [1]}]}] * 2},
            "listed twice",
        ),
        (
            {"format": FORMAT, "prompts": [{"contains": "a", "completions": [{"token_ids": [-1]}]}]},
            "integers >= 0",
        ),
        (  # strict types: a bool is no token id, and the message shows where and what
            {"format": FORMAT, "prompts": [{"contains": "a", "completions": [{"token_ids": [1, True]}]}]},
            r"prompts\[0\]\.completions\[0\]\.token_ids must be a non-empty list of token ids \(integers >= 0\): "
            r"prompts\[0\]\.completions\[0\]\.token_ids\[1\]=True$",
        ),
        (
            {"format": FORMAT, "prompts": [{"contains": 3, "completions": [{"token_ids": [1]}]}]},
            r"prompts\[0\] needs 'contains' \(a string\): prompts\[0\]\.contains=3$",
        ),
        (  # unknown keys are refused, naming the keys that exist there
            {
                "format": FORMAT,
                "prompts": [{"contains": "a", "completions": [{"token_ids": [1], "text": "x"}]}],
            },
            r"prompts\[0\]\.completions\[0\]\.text='x': unknown key \(the keys here are 'token_ids'\)",
        ),
        ([], "format='list', expected 'arctic-rl-fixed-rollouts/1': the file must be a JSON object"),
    ],
)
def test_file_errors_name_the_field(document, message):
    with pytest.raises(FixedRolloutsError, match=message):
        FixedRollouts.from_document(document)


def test_every_problem_of_a_file_is_reported_at_once_the_first_few_in_full():
    bad = [{"contains": f"p{i}", "completions": [{"token_ids": [i, -i - 1]}]} for i in range(7)]
    with pytest.raises(FixedRolloutsError) as caught:
        FixedRollouts.from_document({"format": FORMAT, "prompts": bad})
    message = str(caught.value)
    assert message.startswith("fixed rollouts: 7 problems: ") and message.endswith("; and 2 more")
    assert "prompts[4].completions[0].token_ids[1]=-5" in message  # the fifth, in full
    assert "prompts[5]" not in message


def test_a_prompt_matching_two_entries_is_refused_and_nothing_is_counted():
    fixed = FixedRollouts.from_document(
        {"format": FORMAT, "prompts": [
            {"contains": "ab", "completions": [{"token_ids": [1]}]},
            {"contains": "cd", "completions": [{"token_ids": [2]}]},
        ]}
    )  # fmt: skip
    with pytest.raises(FixedRolloutsError, match=r"matches 2 entries \(\[0, 1\]\)"):
        fixed.serve(["ab", "abcd"], max_tokens=4, stop_ids=frozenset(), decode=str)
    assert fixed.served() == {"ab": 0, "cd": 0}
    (out,) = fixed.serve(["xab"], max_tokens=4, stop_ids=frozenset({1}), decode=str)
    assert (out.token_ids, out.finish_reason) == ((1,), "stop") and fixed.served() == {"ab": 1, "cd": 0}
    with pytest.raises(FixedRolloutsError, match="outside the model's vocabulary"):
        fixed.check_vocabulary(2)


def test_stop_strings_serve_a_completion_that_ends_at_one_and_refuse_one_a_sampler_would_have_cut():
    """With stop strings (a multi-turn loop's): a completion whose text ends at a stop string is served
    whole, finishing "stop" with its text before the stop string (vLLM's include_stop_str_in_output=False);
    one that holds a stop string before its last token is refused, nothing counted."""
    fixed = FixedRollouts.from_document(
        {"format": FORMAT, "prompts": [
            {"contains": "q", "completions": [{"token_ids": [1, 2, 3]}, {"token_ids": [2, 3, 4]}]},
        ]}
    )  # fmt: skip
    letters = lambda ids: "".join(chr(96 + i) for i in ids)  # noqa: E731 (1 -> "a", 2 -> "b", ...)
    (out,) = fixed.serve(["q"], max_tokens=8, stop_ids=frozenset(), decode=letters, stop=("x", "bc"))
    assert (out.token_ids, out.text, out.finish_reason) == ((1, 2, 3), "a", "stop")
    with pytest.raises(
        FixedRolloutsError, match=r"completion 2 holds the stop string 'bc' before its last token"
    ):
        fixed.serve(["q"], max_tokens=8, stop_ids=frozenset(), decode=letters, stop=("bc",))
    assert fixed.served() == {"q": 1}
    (out,) = fixed.serve(["q"], max_tokens=8, stop_ids=frozenset(), decode=letters, stop=("zz",))
    assert (out.token_ids, out.text, out.finish_reason) == ((2, 3, 4), "bcd", "length")

"""The bundled tokenizer: fresh against its corpus, sensible on chat, SQL and digits."""

from __future__ import annotations

import pytest
from arctic_rl_testbed.reference.tokenizer import (
    CORPUS_PATH,
    TAG_TOKENS,
    TOKENIZER_DIR,
    build_tokenizer,
    stop_token_ids,
    train_tokenizer_files,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_shipped_files_are_what_the_corpus_produces():
    files = train_tokenizer_files(CORPUS_PATH.read_text(encoding="utf-8"))
    assert sorted(files) == ["tokenizer.json", "tokenizer_config.json"]
    for name, text in files.items():
        assert (TOKENIZER_DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: rerun build_tokenizer_asset"
        )


def test_vocabulary_and_special_ids(tokenizer):
    assert len(tokenizer) == 1024
    assert tokenizer.convert_ids_to_tokens(tokenizer.pad_token_id) == "<|endoftext|>"
    assert tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id) == "<|im_end|>"
    assert stop_token_ids(tokenizer) == {tokenizer.pad_token_id, tokenizer.eos_token_id}
    for token in ("<|im_start|>", "<|im_end|>", *TAG_TOKENS):
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1 and tokenizer.decode(ids) == token


def test_digits_split_one_per_token(tokenizer):
    ids = tokenizer.encode("The answer is 2024.", add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert pieces[-5:] == ["2", "0", "2", "4", "."]


@pytest.mark.parametrize(
    "keyword",
    [" FROM", " WHERE", " JOIN", " GROUP", " BY", " ORDER", " LIMIT", " DISTINCT", " COUNT", " AND"],
)
def test_sql_keywords_are_single_tokens(tokenizer, keyword):
    assert len(tokenizer.encode(keyword, add_special_tokens=False)) == 1


def test_sql_code_fence(tokenizer):
    ids = tokenizer.encode("```sql\nSELECT name FROM t;\n```", add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert pieces[:3] == ["```", "sql", "\n"]
    assert pieces[3] == "SELECT" and pieces[-1] == "```"


def test_chat_template_and_decoding(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.encode(text + "<think>4</think><answer>4</answer><|im_end|>", add_special_tokens=False)
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded.endswith("<think>4</think><answer>4</answer>")  # tags survive, ChatML markers do not
    assert "<|im_start|>" not in decoded


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tokenizer_path=.*not a local directory"):
        build_tokenizer(tmp_path / "nope")

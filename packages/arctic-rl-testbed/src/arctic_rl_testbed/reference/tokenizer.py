"""The reference backend's tokenizer: a small byte-level BPE trained on text written in this
repository (`assets/tokenizer_corpus.txt`), shipped as `assets/tokenizer/`.

`build_tokenizer()` loads the bundled files (or a local Hugging Face tokenizer directory);
`train_tokenizer_files()` is the deterministic recipe that produced them, used by
`python -m arctic_rl_testbed.reference.build_tokenizer_asset` and by the test that checks
the shipped files are fresh. Digits are split one per token, `<think>`/`<answer>` tags are
ordinary (non-special) added tokens so decoded text keeps them, and the chat template is ChatML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ASSET_DIR = Path(__file__).parent / "assets"
CORPUS_PATH = ASSET_DIR / "tokenizer_corpus.txt"
TOKENIZER_DIR = ASSET_DIR / "tokenizer"

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
EOS_TOKEN = IM_END
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
TAG_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<answer>", "</answer>")
TRAINED_VOCAB_SIZE = 1020  # + the 4 tag tokens = 1024

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer_files(corpus: str) -> dict[str, str]:
    """Train the bundled tokenizer from `corpus`; returns file name -> file text (deterministic)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TRAINED_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([corpus], trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "padding_side": "right",
        "chat_template": CHAT_TEMPLATE,
    }
    return {
        "tokenizer.json": tokenizer.to_str(pretty=True) + "\n",
        "tokenizer_config.json": json.dumps(config, indent=2, sort_keys=True) + "\n",
    }


def build_tokenizer(path: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The bundled tiny tokenizer (`path=None`) or a local Hugging Face tokenizer directory.
    Never downloads: a path that is not an existing directory is an error."""
    from transformers import AutoTokenizer

    directory = TOKENIZER_DIR if path is None else Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"tokenizer_path={str(path)!r} is not a local directory: give a directory holding "
            "tokenizer.json / tokenizer_config.json, or None for the bundled tokenizer"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if tokenizer.pad_token_id is None:
        raise ValueError(
            f"tokenizer at {directory} has no pad token: set pad_token in its tokenizer_config.json"
        )
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer at {directory} has no eos token: set eos_token in tokenizer_config.json")
    return tokenizer


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Token ids that end a generation: the eos token and, when present, `<|endoftext|>`."""
    ids = {int(tokenizer.eos_token_id)}
    vocab = tokenizer.get_vocab()
    if PAD_TOKEN in vocab:
        ids.add(int(vocab[PAD_TOKEN]))
    return frozenset(ids)

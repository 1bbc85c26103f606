"""Regenerate the bundled tokenizer files from the corpus in `assets/tokenizer_corpus.txt`.

    python -m arctic_rl_testbed.reference.build_tokenizer_asset [--check]

`--check` exits non-zero when the shipped files differ from what the corpus produces.
"""

from __future__ import annotations

import argparse
import sys

from arctic_rl_testbed.reference.tokenizer import CORPUS_PATH, TOKENIZER_DIR, train_tokenizer_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files = train_tokenizer_files(CORPUS_PATH.read_text(encoding="utf-8"))
    if args.check:
        stale = [
            name
            for name, text in files.items()
            if not (TOKENIZER_DIR / name).is_file()
            or (TOKENIZER_DIR / name).read_text(encoding="utf-8") != text
        ]
        for name in stale:
            print(f"stale: {TOKENIZER_DIR / name}")
        return 1 if stale else 0
    TOKENIZER_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (TOKENIZER_DIR / name).write_text(text, encoding="utf-8")
        print(f"wrote {TOKENIZER_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

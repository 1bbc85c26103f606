"""`arctic-rl bird preprocess | eval | sample` end to end on the bundled sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from arctic_rl_core.cli.main import main
from arctic_rl_core.envs.bird.preprocess import PreprocessOptions
from arctic_rl_core.envs.bird.prompt import SYSTEM_PROMPT


def test_preprocess_writes_rows_both_frameworks_read(bird_sample: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "parquet"
    assert (
        main(["bird", "preprocess", "--bird-dir", str(bird_sample), "--out", str(out), "--sample-rows", "1"])
        == 0
    )
    train = pq.read_table(out / "train.parquet").to_pylist()
    dev = pq.read_table(out / "dev.parquet").to_pylist()
    assert len(train) == 16 and len(dev) == 10
    row = dev[4]
    assert row["data_source"] == "bird" and row["ability"] == "text2sql" and row["env_class"] == "bird"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["prompt"][0][
        "content"
    ] == SYSTEM_PROMPT
    assert "Question: List the titles of the movies rated 5 stars" in row["prompt"][1]["content"]
    assert row["reward_model"] == {
        "style": "rule",
        "ground_truth": json.loads((bird_sample / "dev/dev.json").read_text(encoding="utf-8"))[4]["SQL"],
    }
    info = row["extra_info"]
    assert info["split"] == "dev" and info["index"] == 4 and info["question_id"] == 4
    assert info["db_id"] == "movie_club" and info["difficulty"] == "moderate"
    assert Path(info["db_path"]).is_absolute() and Path(info["db_path"]).is_file()
    assert train[0]["extra_info"]["question_id"] is None and train[0]["extra_info"]["split"] == "train"
    assert "Sample rows:\n" in row["prompt"][1]["content"] and " -- " in row["prompt"][1]["content"]
    output = capsys.readouterr().out
    assert "written" in output and "dev.parquet" in output


def test_preprocess_compact_schema(bird_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "compact"
    args = ["bird", "preprocess", "--bird-dir", str(bird_sample), "--out", str(out), "--split", "dev"]
    assert main([*args, "--sample-rows", "0", "--example-values", "0", "--no-descriptions"]) == 0
    user = pq.read_table(out / "dev.parquet").to_pylist()[0]["prompt"][1]["content"]
    assert "Sample rows:" not in user and " -- " not in user and "e.g." not in user
    assert (
        "`Running Time (min)` INTEGER" in user and "Foreign keys:\nratings.movie_id = movies.movie_id" in user
    )
    assert len(user) < 1200


def make_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer with a chat template, built here (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(
        models.WordLevel(vocab={"<unk>": 0, "<|user|>": 1, "<|system|>": 2}, unk_token="<unk>")
    )
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    tokenizer.save_pretrained(directory)
    return directory


def test_max_prompt_tokens_drops_long_prompts(bird_sample: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer_dir = make_tokenizer(tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    out = tmp_path / "all"
    main(["bird", "preprocess", "--bird-dir", str(bird_sample), "--out", str(out), "--split", "dev"])
    lengths = [
        len(
            tokenizer.apply_chat_template(
                r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for r in pq.read_table(out / "dev.parquet").to_pylist()
    ]
    limit = sorted(lengths)[5]
    out = tmp_path / "short"
    args = ["bird", "preprocess", "--bird-dir", str(bird_sample), "--out", str(out), "--split", "dev"]
    assert main([*args, "--max-prompt-tokens", str(limit), "--tokenizer", str(tokenizer_dir)]) == 0
    kept = pq.read_table(out / "dev.parquet").to_pylist()
    assert len(kept) == sum(length <= limit for length in lengths)
    assert 0 < len(kept) < 10
    with pytest.raises(ValueError, match="give both"):
        PreprocessOptions(max_prompt_tokens=100)
    with pytest.raises(SystemExit, match="max_prompt_tokens=5 and tokenizer_path=None: give both"):
        main([*args, "--max-prompt-tokens", "5"])


def test_preprocess_missing_database(bird_sample: Path, tmp_path: Path, capsys) -> None:
    root = tmp_path / "bird"
    shutil.copytree(bird_sample, root)
    (root / "train/train_databases/bike_shop/bike_shop.sqlite").unlink()
    args = ["bird", "preprocess", "--bird-dir", str(root), "--out", str(tmp_path / "o"), "--split", "train"]
    with pytest.raises(SystemExit, match=r"(?s)arctic-rl bird preprocess: .*bike_shop\.sqlite"):
        main(args)
    assert main([*args, "--skip-missing"]) == 0
    assert pq.read_table(tmp_path / "o/train.parquet").num_rows == 8
    assert "skipped, missing:" in capsys.readouterr().out


def test_eval_official_and_jsonl_formats(bird_sample: Path, tmp_path: Path, capsys) -> None:
    gold_path = bird_sample / "dev/dev.json"
    gold = json.loads(gold_path.read_text(encoding="utf-8"))
    official = {}
    for i, q in enumerate(gold):
        sql = q["SQL"] if i not in (0, 6) else "SELECT 42"
        official[str(i)] = f"{sql}\t----- bird -----\t{q['db_id']}"
    official["9"] = 0  # the official generator's "no answer"
    (tmp_path / "pred.json").write_text(json.dumps(official), encoding="utf-8")
    report_path = tmp_path / "report.json"
    db_root = bird_sample / "dev/dev_databases"
    common = ["--gold", str(gold_path), "--db-root", str(db_root), "--workers", "2", "--timeout", "5"]
    assert (
        main(["bird", "eval", "--pred", str(tmp_path / "pred.json"), *common, "--json", str(report_path)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "simple               moderate             challenging          total" in printed
    assert "count                4                    4                    2                    10" in printed
    # wrong: 0 (simple), 6 (challenging), 9 (moderate, no prediction)
    assert (
        "accuracy             75.00                75.00                50.00                70.00" in printed
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["summary"]["counts"]["total"] == {"correct": 7, "total": 10}
    assert report["summary"]["errors"]["predicted"] == {"wrong_result": 2, "no_prediction": 1}
    verdicts = {q["question_id"]: q for q in report["questions"]}
    assert not verdicts[0]["correct"] and verdicts[9]["predicted_error"] == "no_prediction"

    lines = [json.dumps({"question_id": q["question_id"], "sql": q["SQL"]}) for q in gold[:5]]
    (tmp_path / "pred.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["bird", "eval", "--pred", str(tmp_path / "pred.jsonl"), *common]) == 0
    printed = capsys.readouterr().out
    assert (
        "accuracy             75.00                50.00                0.00                 50.00" in printed
    )

    (tmp_path / "bad.jsonl").write_text('{"question_id": "x", "sql": "SELECT 1"}\n', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"arctic-rl bird eval: .*line 1"):
        main(["bird", "eval", "--pred", str(tmp_path / "bad.jsonl"), *common])


def test_sample_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bird_sample: Path) -> None:
    monkeypatch.setenv("ARCTIC_RL_CACHE_DIR", str(bird_sample.parent))
    out = tmp_path / "sample"
    assert main(["bird", "sample", "--out", str(out)]) == 0
    assert (out / "train/train.json").read_bytes() == (bird_sample / "train/train.json").read_bytes()
    assert (out / "dev/dev_databases/movie_club/movie_club.sqlite").is_file()
    with pytest.raises(SystemExit, match=r"arctic-rl bird sample: --out .* already exists"):
        main(["bird", "sample", "--out", str(out)])

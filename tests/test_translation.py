"""export.translation on a CPU: a trained tiny translator's twins decode test sentences as `translate` does, batch by
batch, with BLEU and agreement per decoding (the CUDA graphs of each batch shape need a GPU)."""

from __future__ import annotations

import copy

import pytest
import torch
from text_fixtures import PAIRS, write_parallel_corpus

from sparseprune.data.parallel import ParallelTextDataModule
from sparseprune.errors import UserError
from sparseprune.export import translation
from sparseprune.models.lstm_nmt import TranslationTask


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[TranslationTask, ParallelTextDataModule]:
    """A translator that learned the fixture's pairs (as tests/test_nmt.py trains it)."""
    torch.manual_seed(0)
    corpus = write_parallel_corpus(tmp_path_factory.mktemp("corpus"))
    datamodule = ParallelTextDataModule(str(corpus), batch_size=len(PAIRS))
    datamodule.setup()
    task = TranslationTask(**datamodule.model_kwargs(), hidden_size=48, num_layers=2, dropout=0.0)
    batch = next(iter(datamodule.train_dataloader()))
    optimizer = torch.optim.Adam(task.parameters(), lr=0.01)
    for _ in range(150):
        optimizer.zero_grad()
        task.compute_loss(batch).backward()
        optimizer.step()
    return task.eval(), datamodule


def test_sentences_are_padded_to_the_longest_and_batched_to_full_size(trained: tuple) -> None:
    _, datamodule = trained
    sentences = translation.test_sentences(datamodule.train_dataloader(), 5, torch.device("cpu"))
    lengths = [int((row != 0).sum()) for row in sentences.src]
    assert len(sentences.references) == 5 and sentences.src.shape == (5, max(lengths))
    batches = sentences.batches(2)
    assert [b.shape[0] for b in batches] == [2, 2, 2] and not batches[-1][1].any()  # the last row is padding


def test_each_batch_size_and_beam_translates_as_translate(trained: tuple) -> None:
    task, datamodule = trained
    sentences = translation.test_sentences(datamodule.train_dataloader(), len(PAIRS), torch.device("cpu"))
    for beam_size in (1, 3):
        expected = task.translate(sentences.src, beam_size)
        for batch_size in (1, 4):
            texts, run, graphed = translation.translate_all(task, sentences, batch_size, beam_size)
            assert texts == expected and not graphed
            assert len(run()) == -(-len(PAIRS) // batch_size)
    assert expected == sentences.references  # it learned the pairs


def test_rows_time_each_twin_and_compare_it_with_the_first(trained: tuple) -> None:
    task, datamodule = trained
    broken = copy.deepcopy(task)
    torch.nn.init.zeros_(broken.net.generator.weight)  # every step's arg-max is the same word: nothing is right
    sentences = translation.test_sentences(datamodule.train_dataloader(), len(PAIRS), torch.device("cpu"))
    settings = translation.TranslationSettings.of({"batch_sizes": [2], "beam_sizes": [1, 3], "repeats": 2})
    rows = translation.time_translation({"dense": task, "sparse": broken}, sentences, settings)
    assert [(r["decoding"], r["model"]) for r in rows] == [("greedy", "dense"), ("greedy", "sparse"),
                                                           ("beam 3", "dense"), ("beam 3", "sparse")]  # fmt: skip
    for row in rows:
        assert row["sentences"] == len(PAIRS) and row["ms_per_sentence"] > 0 and not row["cuda_graph"]
        assert row["sentences_per_s"] == pytest.approx(1e3 / row["ms_per_sentence"])
    dense, sparse = rows[0], rows[1]
    assert dense["bleu"] == pytest.approx(100.0) and dense["same_as_dense"] == 1.0
    assert sparse["bleu"] < 1.0 and sparse["same_as_dense"] == 0.0


def test_an_empty_loader_is_refused() -> None:
    with pytest.raises(ValueError, match="no sentences"):
        translation.test_sentences([], 4, torch.device("cpu"))


def test_the_chunk_plan_covers_max_length_exactly(trained: tuple) -> None:
    task, _ = trained
    src = torch.ones(2, 7, dtype=torch.long)  # max_length 2 * 7 + 10 = 24: three chunks of 8
    assert translation.Translator(task, src, 1).plan == [8, 8, 8]
    src = torch.ones(2, 9, dtype=torch.long)  # 28: three chunks and a tail of 4
    assert translation.Translator(task, src, 3).plan == [8, 8, 8, 4]


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"sentences": -1}, "translation.sentences must be at least 0"),
        ({"repeats": "many"}, "must be integers"),
        ({"beam_sizes": [1, 0]}, r"translation.beam_sizes must be a list of positive integers, got \[1, 0\]"),
        ({"batch_sizes": []}, "translation.batch_sizes must be a list of positive integers"),
        ({"beams": [1]}, "translation has no key beams"),
    ],
)
def test_bad_settings_get_one_line(group: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        translation.TranslationSettings.of(group)

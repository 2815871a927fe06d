"""Translation: the LSTM encoder-decoder learns a handful of pairs and decodes them back; data errors are clear."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from text_fixtures import PAIRS, write_parallel_corpus

from sparseprune.data.bible import BibleDataModule, read_verses, tokenize
from sparseprune.data.parallel import ParallelTextDataModule
from sparseprune.data.vocab import Vocab
from sparseprune.errors import UserError
from sparseprune.models.lstm_nmt import TranslationTask
from sparseprune.pruning.gemm_view import find_prunable


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Step-by-step recurrences are many tiny ops: extra threads only contend on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_task(datamodule: ParallelTextDataModule, bidirectional: bool) -> TranslationTask:
    return TranslationTask(
        **datamodule.model_kwargs(),
        hidden_size=48,
        num_layers=2,
        bidirectional=bidirectional,
        dropout=0.0,
        test_beam_size=3,
    )


@pytest.mark.parametrize("bidirectional", [False, True])
def test_tiny_model_overfits_and_decodes_back(tmp_path: Path, bidirectional: bool) -> None:
    torch.manual_seed(0)
    datamodule = ParallelTextDataModule(str(write_parallel_corpus(tmp_path)), batch_size=len(PAIRS))
    datamodule.setup()
    task = tiny_task(datamodule, bidirectional)
    batch = next(iter(datamodule.train_dataloader()))
    optimizer = torch.optim.Adam(task.parameters(), lr=0.01)
    for _ in range(150):
        optimizer.zero_grad()
        loss = task.compute_loss(batch)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    task.eval()
    references = batch["references"]
    assert task.translate(batch["src"], beam_size=1) == references
    assert task.translate(batch["src"], beam_size=3) == references
    task.test_bleu.update(task.translate(batch["src"], beam_size=3), references)
    assert task.test_bleu.compute().item() == pytest.approx(100.0)


def test_gate_matrices_are_the_pruned_weights(tmp_path: Path) -> None:
    datamodule = ParallelTextDataModule(str(write_parallel_corpus(tmp_path)))
    task = tiny_task(datamodule, bidirectional=True)
    names = sorted(w.name for w in find_prunable(task, task.prune_exclude))
    assert names == sorted(
        [f"net.encoder.layers.0.{d}.{g}.weight" for d in (0, 1) for g in ("ih", "hh")]
        + [f"net.decoder.layers.{i}.{g}.weight" for i in (0, 1) for g in ("ih", "hh")]
    )


def test_padding_does_not_change_the_encoding(tmp_path: Path) -> None:
    torch.manual_seed(0)
    task = tiny_task(ParallelTextDataModule(str(write_parallel_corpus(tmp_path))), bidirectional=True).eval()
    src = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0]])
    memory, states = task.net.encoder(src, src != 0)
    memory_padded, states_padded = task.net.encoder(padded, padded != 0)
    torch.testing.assert_close(memory_padded[:, :3], memory)
    for (h, c), (hp, cp) in zip(states, states_padded, strict=True):
        torch.testing.assert_close(hp, h)
        torch.testing.assert_close(cp, c)


def test_missing_corpus_file_says_what_to_provide(tmp_path: Path) -> None:
    write_parallel_corpus(tmp_path)
    (tmp_path / "tst2013.vi").unlink()
    with pytest.raises(UserError, match="tst2013.vi"):
        ParallelTextDataModule(str(tmp_path)).setup()


def test_misaligned_corpus_is_rejected(tmp_path: Path) -> None:
    write_parallel_corpus(tmp_path)
    (tmp_path / "train.vi").write_text("only one line\n")
    with pytest.raises(UserError, match="misaligned"):
        ParallelTextDataModule(str(tmp_path)).setup()


def test_long_training_pairs_are_truncated_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    datamodule = ParallelTextDataModule(str(write_parallel_corpus(tmp_path)), max_length=3)
    datamodule.setup()
    assert max(len(s) for s in datamodule.datasets["train"].src) == 3
    assert "truncated" in caplog.text
    assert datamodule.datasets["val"].references[-1] == PAIRS[-1][1]  # evaluation keeps whole sentences


def test_vocab_file_round_trip(tmp_path: Path) -> None:
    vocab = Vocab.build([["b", "a", "b"], ["c"]], max_size=6)
    vocab.save(tmp_path / "vocab.x")
    assert (tmp_path / "vocab.x").read_text().splitlines()[:3] == ["<unk>", "<s>", "</s>"]
    loaded = Vocab.from_file(tmp_path / "vocab.x")
    assert loaded.itos == vocab.itos == ["<pad>", "<unk>", "<s>", "</s>", "b", "a"]
    assert loaded.decode(loaded.encode(["a", "zzz", "b"]) + [Vocab.eos_id, 4]) == ["a", "<unk>", "b"]


IMP = """$$$[ Module Heading ]
$$$Genesis 0:0
An introduction that is not a verse.
$$$Genesis 1:1
<w lemma="strong:H0430">In</w> the beginning, <w>God</w><note placement="foot">A footnote.</note> created
the heavens &amp; the earth.
$$$Genesis 1:2

$$$Genesis 1:3
God said, “Let there be light,” and there was light.
"""


def test_sword_export_is_cleaned_into_verses(tmp_path: Path) -> None:
    (tmp_path / "mod.imp").write_text(IMP)
    verses = read_verses(tmp_path / "mod.imp")
    assert verses == {
        "Genesis 1:1": "In the beginning, God created the heavens & the earth.",
        "Genesis 1:3": "God said, “Let there be light,” and there was light.",
    }
    assert tokenize(verses["Genesis 1:3"]) == [
        "God",
        "said",
        ",",
        "“",
        "Let",
        "there",
        "be",
        "light",
        ",",
        "”",
        "and",
        "there",
        "was",
        "light",
        ".",
    ]
    assert tokenize("don’t") == ["don’t"]


def test_missing_sword_tools_say_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="apt-get install sword-text-web sword-text-sparv libsword-utils"):
        BibleDataModule(data_dir=str(tmp_path)).model_kwargs()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mod2imp") is None, reason="apt-get install sword-text-web sword-text-sparv")
def test_real_bible_corpus(tmp_path: Path) -> None:
    datamodule = BibleDataModule(data_dir=str(tmp_path), val_subset=8)
    datamodule.setup()
    sizes = {name: len(dataset) for name, dataset in datamodule.datasets.items()}
    assert sizes["val"] == sizes["test"] == 8 and 20000 < sizes["train"] < 23000
    lines = (datamodule.corpus_dir() / "train.en").read_text().splitlines()
    assert len(lines) == sizes["train"] and max(len(line.split()) for line in lines) <= 60

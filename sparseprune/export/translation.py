"""Timed translation: a translator's dense and sparse twins decode the same test sentences, greedily and with beams.

A decoding step of the LSTM translator is a few small GEMMs and elementwise ops: launched one by one from Python,
the host sets its time, not the kernels. On a GPU each batch shape therefore gets CUDA graphs of its search
(`models.decoding`): one of the encoding and reset, one of CHUNK_STEPS steps, one of the steps a max_length that is
no multiple of it leaves; the host replays a chunk and then asks whether every row has finished, once per chunk.
Extra steps after the last row finished write only pads (greedy) or extend every finished beam by a free pad
(beams), so the translations are the eager ones. Elsewhere the search runs eagerly.
Every batch of a setting is padded to the longest source of the sentences timed, so one set of graphs serves them
all (the encoder masks padding; `max_length` follows the padded length, for both twins alike).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from sparseprune.errors import UserError
from sparseprune.export.timing import capture_graph
from sparseprune.metrics import CorpusBleu
from sparseprune.models.decoding import GreedySearch, run_eagerly
from sparseprune.models.lstm_nmt import TranslationTask

CHUNK_STEPS = 8  # decoding steps per graph replay: one host check of "all finished" per chunk


@dataclass(frozen=True)
class TranslationSettings:
    """export.yaml's `translation` group: what a translator's export decodes and times (0 sentences: nothing)."""

    sentences: int = 64
    batch_sizes: tuple[int, ...] = (1, 64)
    beam_sizes: tuple[int, ...] = (1, 10)
    repeats: int = 3

    @classmethod
    def of(cls, group: Mapping[str, Any] | None) -> TranslationSettings:
        """The settings of a config group (lists as tuples); the defaults where there is none."""
        values = dict(group or {})
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise UserError(f"translation has no key {unknown[0]} (keys: sentences, batch_sizes, beam_sizes, repeats)")
        return cls(
            **{k: tuple(v) if isinstance(v, Sequence) and not isinstance(v, str) else v for k, v in values.items()}
        )

    def __post_init__(self) -> None:
        if not isinstance(self.sentences, int) or not isinstance(self.repeats, int):
            raise UserError(f"translation.sentences and translation.repeats must be integers, got {self.sentences!r} "
                            f"and {self.repeats!r}")  # fmt: skip
        if self.sentences < 0 or self.repeats < 1:
            raise UserError(f"translation.sentences must be at least 0 and translation.repeats at least 1, got "
                            f"{self.sentences} and {self.repeats}")  # fmt: skip
        for key in ("batch_sizes", "beam_sizes"):
            values = getattr(self, key)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise UserError(f"translation.{key} must be a list of positive integers, got {list(values)}")


class Translator:
    """Decoding of batches of one shape by one twin: replayed from CUDA graphs on a GPU, eager elsewhere."""

    def __init__(self, task: TranslationTask, src: torch.Tensor, beam_size: int) -> None:
        self.search = task.search(src, beam_size)
        full, tail = divmod(self.search.max_length, CHUNK_STEPS)
        self.plan = [CHUNK_STEPS] * full + ([tail] if tail else [])  # steps per replay, max_length in all
        self.graphs: dict[str, Callable[[], object]] | None = self._capture(src.device) if src.is_cuda else None

    def _capture(self, device: torch.device) -> dict[str, Callable[[], object]] | None:
        """Graphs of the restart and of each chunk length, after one eager decoding on the static buffers as warm-up
        (cuBLAS handles, the extension's host copies); None where a capture fails."""
        run_eagerly(self.search)
        torch.cuda.synchronize(device)
        calls = {"restart": self.search.restart} | {str(n): _steps(self.search, n) for n in set(self.plan)}
        graphs = {name: capture_graph(fn, device) for name, fn in calls.items()}
        if any(graph is None for graph in graphs.values()):
            return None
        return {name: graph for name, graph in graphs.items() if graph is not None}

    @property
    def graphed(self) -> bool:
        return self.graphs is not None

    def __call__(self, src: torch.Tensor) -> torch.Tensor:
        """Token ids per row of src (B, S), src of the shape the translator was built for."""
        self.search.load(src)
        if self.graphs is None:
            return run_eagerly(self.search)
        self.graphs["restart"]()
        steps = 0
        for count in self.plan:
            self.graphs[str(count)]()
            steps += count
            if self.search.done():
                break
        return self.search.result(steps)


def _steps(search: GreedySearch, count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            search.advance()

    return run


@dataclass(frozen=True)
class Sentences:
    """Test sentences: source ids padded to one length (N, S), and their reference translations."""

    src: torch.Tensor
    references: list[str]

    def batches(self, size: int) -> list[torch.Tensor]:
        """Consecutive batches of `size` sentences, the last one padded with empty sources to full size."""
        count = self.src.shape[0]
        rows = F.pad(self.src, (0, 0, 0, -count % size))
        return list(rows.split(size))


def test_sentences(loader: Any, count: int, device: torch.device) -> Sentences:
    """The loader's first `count` sentences (fewer if it has fewer), padded to their longest source."""
    sources: list[torch.Tensor] = []
    references: list[str] = []
    for batch in loader:
        for row, reference in zip(batch["src"], batch["references"], strict=True):
            sources.append(row[row != 0])
            references.append(reference)
        if len(sources) >= count:
            break
    sources, references = sources[:count], references[:count]
    if not sources:
        raise ValueError("the loader holds no sentences")
    src = torch.nn.utils.rnn.pad_sequence(sources, batch_first=True).to(device)
    return Sentences(src, references)


@torch.no_grad()
def translate_all(
    task: TranslationTask, sentences: Sentences, batch_size: int, beam_size: int
) -> tuple[list[str], Callable[[], object], bool]:
    """Every sentence's translation, a call that translates them all again (graphs built, for timing), and whether
    it replays CUDA graphs."""
    batches = sentences.batches(batch_size)
    translator = Translator(task, batches[0], beam_size)

    @torch.no_grad()
    def run() -> list[torch.Tensor]:
        return [translator(batch) for batch in batches]

    texts = [text for ids in run() for text in task.texts(ids)][: len(sentences.references)]
    return texts, run, translator.graphed


def _bleu(texts: Sequence[str], references: Sequence[str], tokenize: str) -> float:
    bleu = CorpusBleu(tokenize=tokenize)
    bleu.update(list(texts), list(references))
    return float(bleu.compute())


def _wall_ms(run: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Wall milliseconds of `repeats` calls (after one untimed call): the host waits once per chunk of steps."""
    samples = []
    for index in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index:
            samples.append(1e3 * (time.perf_counter() - begin))
    return samples


def time_translation(
    twins: dict[str, TranslationTask],
    sentences: Sentences,
    settings: TranslationSettings,
) -> list[dict[str, Any]]:
    """One row per (beam size, batch size, twin): ms per sentence, sentences per second, BLEU against the
    references, and the share of sentences each twin translates exactly as the first twin (the masked dense model)."""
    device = sentences.src.device
    count = len(sentences.references)
    rows = []
    for beam_size in settings.beam_sizes:
        for batch_size in settings.batch_sizes:
            first: list[str] | None = None
            for name, task in twins.items():
                texts, run, graphed = translate_all(task, sentences, batch_size, beam_size)
                first = texts if first is None else first
                median_ms = statistics.median(_wall_ms(run, device, settings.repeats))
                rows.append({
                    "decoding": "greedy" if beam_size == 1 else f"beam {beam_size}",
                    "batch_size": batch_size,
                    "model": name,
                    "sentences": count,
                    "ms_per_sentence": median_ms / count,
                    "sentences_per_s": 1e3 * count / median_ms,
                    "bleu": _bleu(texts, sentences.references, task.hparams.bleu_tokenize),
                    "same_as_dense": sum(a == b for a, b in zip(texts, first, strict=True)) / count,
                    "cuda_graph": graphed,
                })  # fmt: skip
    return rows

"""GLUE sentence (pair) classification through Hugging Face `datasets`.

A task is read from `<source>/<task>` when that directory exists, either as saved by
`DatasetDict.save_to_disk` or as the hub repository's parquet files (`train-*.parquet`,
`validation*.parquet`); otherwise, when online, from the hub (`nyu-mll/glue`) into `data_dir/hf`. GLUE's
test labels are hidden, so the validation split doubles as the test split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparseprune.data.text import TextClassificationDataModule, TextSplit
from sparseprune.errors import UserError

HUB_DATASET = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    """Columns, label count, validation split and reported metrics of one GLUE task."""

    text_a: str
    text_b: str | None
    num_labels: int
    metrics: tuple[str, ...]
    val_split: str = "validation"


GLUE_TASKS = {
    "mnli": GlueTask("premise", "hypothesis", 3, ("acc",), "validation_matched"),
    "sst2": GlueTask("sentence", None, 2, ("acc",)),
    "qqp": GlueTask("question1", "question2", 2, ("acc", "f1")),
    "qnli": GlueTask("question", "sentence", 2, ("acc",)),
    "mrpc": GlueTask("sentence1", "sentence2", 2, ("acc", "f1")),
    "cola": GlueTask("sentence", None, 2, ("acc", "mcc")),
    "rte": GlueTask("sentence1", "sentence2", 2, ("acc",)),
}


def glue_task(name: str) -> GlueTask:
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise UserError(f"unknown GLUE task {name!r}; valid tasks: {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def load_glue(task: str, source: Path, cache_dir: Path) -> Any:
    """The task's DatasetDict from local files, else from the hub when online."""
    import datasets

    local = source / task
    if (local / "dataset_dict.json").is_file():
        return datasets.load_from_disk(str(local))
    if local.is_dir():
        files = {split: sorted(str(p) for p in local.glob(f"{split}*.parquet")) for split in ("train", "validation")}
        if not all(files.values()):
            raise UserError(f"{local} holds neither a save_to_disk dataset nor train-*/validation*.parquet files")
        return datasets.load_dataset("parquet", data_files=files)
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserError(
            f"GLUE task {task} not found under {source} (offline; save it there with "
            f"datasets.load_dataset('{HUB_DATASET}', '{task}').save_to_disk('{local}'))"
        )
    try:
        return datasets.load_dataset(HUB_DATASET, task, cache_dir=str(cache_dir))
    except Exception as err:  # the hub raises many types (connection, HTTP, missing config)
        raise UserError(
            f"GLUE task {task} is not under {source} and could not be downloaded: {str(err).splitlines()[0]}"
        ) from err


class GlueDataModule(TextClassificationDataModule):
    """One GLUE task; its metrics (accuracy, F1, Matthews) come from the task table above."""

    def __init__(self, task: str = "sst2", source: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task_name = task.lower().replace("-", "")
        self.task = glue_task(task)
        self.source = Path(source) if source else self.data_dir / "glue"
        self.label_names = tuple(str(i) for i in range(self.task.num_labels))
        self.metrics = self.task.metrics

    def source_id(self) -> dict[str, Any]:
        return {"glue": self.task_name, "source": str(self.source.resolve())}

    def read_splits(self) -> dict[str, TextSplit]:
        raw = load_glue(self.task_name, self.source, self.data_dir / "hf")
        for split in ("train", self.task.val_split):
            if split not in raw:
                raise UserError(f"GLUE {self.task_name}: split {split!r} missing (found {list(raw)})")
        val = self._split(raw[self.task.val_split])
        return {"train": self._split(raw["train"]), "val": val, "test": val}

    def _split(self, rows: Any) -> TextSplit:
        columns = [self.task.text_a, "label"] + ([self.task.text_b] if self.task.text_b else [])
        missing = [c for c in columns if c not in rows.column_names]
        if missing:
            raise UserError(f"GLUE {self.task_name}: columns {missing} missing (found {rows.column_names})")
        labels = list(rows["label"])
        bad = sorted({label for label in labels if not 0 <= label < self.task.num_labels})
        if bad:
            raise UserError(f"GLUE {self.task_name}: labels {bad[:5]} outside 0..{self.task.num_labels - 1}")
        text_b = list(rows[self.task.text_b]) if self.task.text_b else None
        return TextSplit(list(rows[self.task.text_a]), text_b, labels)

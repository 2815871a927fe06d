"""BERT sequence classification: the TW paper's Transformer workload.

Each encoder layer has six prunable GEMMs (query, key, value, attention output, FFN in, FFN out): 72 in
BERT-base, 36 in the embedded 6-layer MiniLM. Embeddings, pooler and classifier stay dense by default.
The network lives under `model`, so parameter names read `model.bert.encoder.layer.<i>...`. With `distill`
on, pruned fine-tuning learns from a frozen copy of the network as pruning found it (`sparseprune.distill`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from sparseprune.distill import DistillConfig, Teacher, hidden_state_loss, soft_target_loss
from sparseprune.errors import UserError
from sparseprune.metrics import classification_metrics
from sparseprune.models.base import PrunableTask
from sparseprune.pretrained import resolve_pretrained

DENSE_BY_DEFAULT = ("*embeddings*", "*pooler*", "*classifier*")


def load_bert(pretrained: str, num_labels: int, dropout: float | None = None) -> Any:
    """BertForSequenceClassification from a checkpoint, with a fresh classifier head of `num_labels`."""
    from transformers import AutoConfig, BertForSequenceClassification

    path, local = resolve_pretrained(pretrained)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=local)
    except (OSError, ValueError) as err:
        raise UserError(f"pretrained={pretrained} is not a BERT checkpoint: {str(err).splitlines()[0]}") from err
    if config.model_type != "bert":
        raise UserError(f"pretrained={pretrained} is a {config.model_type!r} model, not BERT")
    config.num_labels = num_labels
    if dropout is not None:
        config.hidden_dropout_prob = dropout
    try:
        model, info = BertForSequenceClassification.from_pretrained(
            path, config=config, local_files_only=local, output_loading_info=True
        )
    except (OSError, ValueError) as err:
        raise UserError(f"pretrained={pretrained}: no loadable BERT weights: {str(err).splitlines()[0]}") from err
    missing = [k for k in info["missing_keys"] if not k.startswith(("classifier.", "bert.pooler."))]
    if missing:
        raise UserError(
            f"pretrained={pretrained}: {len(missing)} encoder weights missing from the checkpoint "
            f"(e.g. {missing[0]}); is it a BERT checkpoint?"
        )
    return model.train()  # from_pretrained returns eval mode; Lightning keeps submodules' modes as found


class TextClassifier(PrunableTask):
    """Fine-tunes a pretrained BERT on a sentence (pair) classification task; `val/acc` is the stage metric."""

    monitor = "val/acc"
    default_prune_exclude = DENSE_BY_DEFAULT

    def __init__(
        self,
        num_labels: int,
        pretrained: str = "embedded-minilm",
        metrics: Sequence[str] = ("acc",),
        tokenizer_vocab_size: int | None = None,
        max_length: int | None = None,
        dropout: float | None = None,
        distill: Mapping[str, float] | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
        prune_exclude: Sequence[str] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, prune_exclude=prune_exclude)
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        self.distill = DistillConfig.from_mapping(distill)
        self.teacher = Teacher()  # snapshot in on_pruning_start when distill is on
        self.model = load_bert(pretrained, num_labels, dropout)
        config = self.model.config
        if tokenizer_vocab_size is not None and tokenizer_vocab_size > config.vocab_size:
            raise UserError(
                f"tokenizer has {tokenizer_vocab_size} tokens but {pretrained} embeds only "
                f"{config.vocab_size}: data.tokenizer and model.pretrained must match"
            )
        if max_length is not None and max_length > config.max_position_embeddings:
            raise UserError(
                f"data.max_length={max_length} exceeds the model's {config.max_position_embeddings} positions"
            )
        self.val_metrics = classification_metrics(metrics, num_labels, prefix="val/")
        self.test_metrics = classification_metrics(metrics, num_labels, prefix="test/")

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(**model_inputs(batch)).logits

    def predict_batch(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Class logits: what export compares (sparse vs masked dense) and times. The padding mask goes in as the 4-D
        mask BertModel would build from it, which it takes as it is: built inside, it first asks the GPU whether any
        token is padded, a host sync that no CUDA graph can capture, so the pass was timed as eager calls."""
        inputs = model_inputs(batch)
        if inputs.get("attention_mask") is not None and inputs["attention_mask"].dim() == 2:
            inputs["attention_mask"] = inputs["attention_mask"].bool()[:, None, None, :]
        return self.model(**inputs).logits

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross entropy, also with distillation on: Taylor importance should rank weights by what they do for the task.

        At the first stage the teacher is the student itself, so distillation terms would add (dropout aside) no
        gradient; later they would rank by fidelity to the teacher instead. With plain CE, runs with and without
        distillation score weights alike and differ only in how they fine-tune.
        """
        return F.cross_entropy(self(batch), batch["labels"])

    def on_pruning_start(self) -> None:
        """The network as pruning finds it becomes the teacher of every later fine-tuning step."""
        if self.distill.enabled:
            self.teacher.snapshot(self.model)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if not self.teacher.ready:  # distillation off, or the dense phase before pruning
            return super().training_step(batch, batch_idx)
        hidden = self.distill.hidden_weight > 0
        student = self.model(**model_inputs(batch), output_hidden_states=hidden)
        teacher = self.teacher(self.device, **model_inputs(batch), output_hidden_states=hidden)
        terms = {
            "ce_loss": F.cross_entropy(student.logits, batch["labels"]),
            "distill_loss": soft_target_loss(student.logits, teacher.logits, self.distill.temperature),
        }
        if hidden:  # every encoder layer's output; hidden_states[0] is the (dense) embedding output
            terms["hidden_loss"] = hidden_state_loss(
                student.hidden_states[1:], teacher.hidden_states[1:], batch["attention_mask"]
            )
        loss = self.distill.combine(**terms)
        batch_size = self.batch_size_of(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch_size)
        self.log_dict({f"train/{name}": value for name, value in terms.items()}, batch_size=batch_size)
        return loss

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        self.teacher.save_into(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed run distils from the saved teacher, never from a snapshot of its already-pruned self."""
        super().on_load_checkpoint(checkpoint)
        if self.distill.enabled:
            self.teacher.load_from(checkpoint, like=self.model)

    def _evaluate(self, batch: dict[str, torch.Tensor], split: str, metrics: Any) -> None:
        logits = self(batch)
        batch_size = self.batch_size_of(batch)
        loss = F.cross_entropy(logits, batch["labels"])
        metrics.update(logits.argmax(dim=-1), batch["labels"])
        self.log(f"{split}/loss", loss, prog_bar=split == "val", batch_size=batch_size, sync_dist=True)
        self.log_dict(metrics, prog_bar=True, batch_size=batch_size)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_metrics)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_metrics)


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What BertForSequenceClassification reads from a batch (labels stay out: the task computes its own loss)."""
    return {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids")}

"""A trained task's network as data (family + constructor arguments) and back, so an exported model is rebuilt with no
checkpoint, Lightning module, pretrained download or dataset.

Only the network inside the task is described (`ImageClassifier.net`, `TextClassifier.model`,
`TranslationTask.net`): it is what runs at inference, and it is built from plain torch (VGG16, the LSTM translator)
or from a transformers config (BERT), never from the training code.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from sparseprune.errors import UserError

VGG16_ARGS = ("num_classes", "in_channels", "width_multiplier", "batch_norm", "dropout")
SEQ2SEQ_ARGS = ("src_vocab_size", "tgt_vocab_size", "hidden_size", "num_layers", "bidirectional", "dropout")


def describe(task: nn.Module) -> dict[str, Any]:
    """{"family", "module" (the task's attribute holding the network), "config"} of a trained task."""
    from sparseprune.models.bert import TextClassifier
    from sparseprune.models.image_classifier import ImageClassifier
    from sparseprune.models.lstm_nmt import TranslationTask
    from sparseprune.models.vgg import resolve_variant

    hparams = getattr(task, "hparams", {})
    if isinstance(task, ImageClassifier):
        variant = resolve_variant(hparams["variant"], hparams["image_size"])
        config = {key: hparams[key] for key in VGG16_ARGS} | {"variant": variant}
        return {"family": "vgg16", "module": "net", "config": config}
    if isinstance(task, TextClassifier):
        bert_config = task.model.config
        return {"family": "bert", "module": "model", "config": bert_config.to_dict(),
                "attn_implementation": bert_config._attn_implementation}  # fmt: skip
    if isinstance(task, TranslationTask):
        embedding_size = hparams["embedding_size"] or hparams["hidden_size"]
        config = {key: hparams[key] for key in SEQ2SEQ_ARGS} | {"embedding_size": embedding_size}
        return {"family": "lstm_nmt", "module": "net", "config": config}
    raise UserError(f"export cannot describe a {type(task).__name__} as data; known: ImageClassifier, "
                    "TextClassifier, TranslationTask")  # fmt: skip


def _vgg16(architecture: dict[str, Any]) -> nn.Module:
    from sparseprune.models.vgg import build_vgg16

    return build_vgg16(**architecture["config"])


def _bert(architecture: dict[str, Any]) -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_dict(architecture["config"])
    config._attn_implementation = architecture["attn_implementation"]  # as trained: sdpa and eager round differently
    return BertForSequenceClassification(config)


def _lstm_nmt(architecture: dict[str, Any]) -> nn.Module:
    from sparseprune.models.seq2seq import Seq2Seq

    return Seq2Seq(**architecture["config"])


BUILDERS = {"vgg16": _vgg16, "bert": _bert, "lstm_nmt": _lstm_nmt}


def build(architecture: dict[str, Any]) -> nn.Module:
    """The network `describe` described, freshly initialised and in eval mode (its weights come from the artifact)."""
    family = architecture.get("family")
    if family not in BUILDERS:
        raise UserError(f"unknown model family {family!r} in the artifact; known: {sorted(BUILDERS)}")
    try:
        return BUILDERS[family](architecture).eval()
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"the artifact's {family} architecture does not build: {error}") from None

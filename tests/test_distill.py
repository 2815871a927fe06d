"""Distillation from the dense network during pruned fine-tuning: the loss by hand, the teacher taken when pruning
starts and frozen from then on, kept away from the optimizer and the pruner, restored on resume; bad values."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from text_fixtures import make_tiny_bert
from torch.utils.data import DataLoader

from sparseprune.app.callbacks import StagedPruning
from sparseprune.distill import TEACHER_KEY, DistillConfig, Teacher, hidden_state_loss, soft_target_loss
from sparseprune.errors import UserError
from sparseprune.models.bert import TextClassifier
from sparseprune.pretrained import load_tokenizer

DISTILL = {"weight": 0.5, "temperature": 2.0, "hidden_weight": 1.0}
TEXTS = ["good movie", "bad movie", "i love it", "i hate it", "great day", "awful car", "the dog", "a cat"]


# --- the loss ---------------------------------------------------------------------------------------


def softmax(row: list[float], temperature: float) -> list[float]:
    exps = [math.exp(v / temperature) for v in row]
    return [e / sum(exps) for e in exps]


def test_loss_matches_a_hand_computation() -> None:
    student = [[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]]
    teacher = [[2.0, 1.0, 0.0], [0.0, 0.0, 4.0]]
    labels = [1, 2]
    temperature = 2.0
    kl = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        p_s, p_t = softmax(s_row, temperature), softmax(t_row, temperature)
        kl += sum(t * (math.log(t) - math.log(s)) for s, t in zip(p_s, p_t, strict=True))
    soft = temperature**2 * kl / 2  # mean over the batch of 2
    ce = -sum(math.log(softmax(row, 1.0)[y]) for row, y in zip(student, labels, strict=True)) / 2
    # hidden states of 2 layers, batch 1, 3 tokens (the last one padding), width 2
    student_hidden = [torch.tensor([[[1.0, 2.0], [0.0, 0.0], [9.0, 9.0]]]), torch.tensor([[[1, 1], [2, 2], [5, 5.0]]])]
    teacher_hidden = [torch.tensor([[[0.0, 2.0], [1.0, 1.0], [0.0, 0.0]]]), torch.tensor([[[1, 1], [2, 0], [0, 0.0]]])]
    mask = torch.tensor([[1, 1, 0]])
    # layer 0: tokens (1 + 0) / 2 = 0.5 and (1 + 1) / 2 = 1 -> 0.75; layer 1: 0 and (0 + 4) / 2 = 2 -> 1
    hidden = (0.75 + 1.0) / 2

    soft_loss = soft_target_loss(torch.tensor(student), torch.tensor(teacher), temperature)
    hidden_loss = hidden_state_loss(student_hidden, teacher_hidden, mask)
    assert soft_loss.item() == pytest.approx(soft, rel=1e-6)
    assert hidden_loss.item() == pytest.approx(hidden, rel=1e-6)
    ce_loss = torch.nn.functional.cross_entropy(torch.tensor(student), torch.tensor(labels))
    config = DistillConfig(weight=0.3, temperature=temperature, hidden_weight=0.7)
    total = config.combine(ce_loss, soft_loss, hidden_loss)
    assert total.item() == pytest.approx(0.7 * ce + 0.3 * soft + 0.7 * hidden, rel=1e-6)
    assert config.combine(ce_loss, soft_loss).item() == pytest.approx(0.7 * ce + 0.3 * soft, rel=1e-6)


def test_identical_logits_and_states_cost_nothing() -> None:
    logits = torch.randn(4, 3)
    states = [torch.randn(4, 5, 8)]
    assert soft_target_loss(logits, logits.clone(), 3.0).item() == pytest.approx(0.0, abs=1e-6)
    assert hidden_state_loss(states, [s.clone() for s in states]).item() == 0.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"weight": -0.1}, r"model.distill.weight must lie in \[0, 1\]"),
        ({"weight": 1.5}, r"model.distill.weight must lie in \[0, 1\]"),
        ({"weight": float("nan")}, r"model.distill.weight must lie in \[0, 1\]"),
        ({"temperature": 0}, "model.distill.temperature must be positive"),
        ({"temperature": -2.0}, "model.distill.temperature must be positive"),
        ({"hidden_weight": -1.0}, "model.distill.hidden_weight must be >= 0"),
        ({"alpha": 0.5}, "model.distill has no key 'alpha'"),
        ({"weight": "half"}, "model.distill values must be numbers"),
    ],
)
def test_bad_values_are_user_errors(values: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        DistillConfig.from_mapping(values)


def test_off_unless_a_weight_is_positive() -> None:
    assert not DistillConfig.from_mapping(None).enabled
    assert not DistillConfig.from_mapping({"weight": 0.0, "temperature": 4.0}).enabled
    assert DistillConfig.from_mapping({"weight": 0.5}).enabled
    assert DistillConfig.from_mapping({"hidden_weight": 0.1}).enabled


def test_teacher_follows_the_students_device_without_gradients() -> None:
    student = torch.nn.Linear(4, 2)
    teacher = Teacher()
    teacher.snapshot(student)
    output = teacher(torch.device("meta"), torch.empty(3, 4, device="meta"))  # as after a restore on CPU
    assert output.device.type == "meta" and not output.requires_grad
    assert all(p.device.type == "meta" for p in teacher.network.parameters())
    assert all(p.device.type == "cpu" for p in student.parameters())


# --- the teacher in a real fit ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def batches(pretrained: Path) -> DataLoader:
    tokenizer = load_tokenizer(str(pretrained))
    encoded = [
        dict(tokenizer(TEXTS[i : i + 4], padding=True, return_tensors="pt")) | {"labels": torch.tensor([1, 0, 1, 0])}
        for i in (0, 4)
    ]
    return DataLoader(encoded, batch_size=None)  # each item is a ready batch


def classifier(pretrained: Path, distill: dict | None = DISTILL) -> TextClassifier:
    optimizer = partial(torch.optim.AdamW, lr=1e-3)
    return TextClassifier(num_labels=2, pretrained=str(pretrained), dropout=0.0, distill=distill, optimizer=optimizer)


def staged_pruning() -> StagedPruning:
    return StagedPruning(
        pattern={"name": "tw", "granularity": 32},
        schedule={"target": 0.5, "stages": 1, "dense_epochs": 1, "finetune_epochs": 2},
        importance={"kind": "magnitude"},
    )


def fit(task: TextClassifier, callbacks: list, max_epochs: int, root: Path, ckpt_path: Path | None = None) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=max_epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, accelerator="cpu", num_sanity_val_steps=0,
    )  # fmt: skip
    loader = batches(Path(task.hparams.pretrained))
    trainer.fit(task, loader, loader, ckpt_path=ckpt_path)
    return trainer


class DenseWeights(L.Callback):
    """The student's weights at the end of the dense epoch, the last moment before the first stage prunes."""

    def __init__(self) -> None:
        self.state: dict[str, torch.Tensor] = {}
        self.teacher_ready_before_pruning: bool | None = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: TextClassifier) -> None:
        if trainer.current_epoch == 0:
            self.state = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}
            self.teacher_ready_before_pruning = pl_module.teacher.ready


def same_weights(network: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    current = network.state_dict()
    return current.keys() == state.keys() and all(torch.equal(current[k], state[k]) for k in state)


def test_teacher_is_the_dense_network_frozen_and_unseen(tiny_bert: Path, tmp_path: Path) -> None:
    L.seed_everything(0)
    task, pruner, dense = classifier(tiny_bert), staged_pruning(), DenseWeights()
    trainer = fit(task, [pruner, dense], 3, tmp_path)

    assert dense.teacher_ready_before_pruning is False  # the dense phase trains on plain cross entropy
    teacher = task.teacher.network
    assert teacher is not None and not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())
    assert same_weights(teacher, dense.state)  # snapshot at pruning start, unchanged by two epochs of steps
    assert not same_weights(task.model, dense.state)  # while the student trained and was pruned
    for weight in pruner.weights:  # masks zero the student's weights, never the teacher's
        name = weight.name.removeprefix("model.")
        assert bool((weight.param == 0).any()) and not bool((teacher.state_dict()[name] == 0).any())

    teacher_ids = {id(p) for p in teacher.parameters()}
    assert teacher_ids.isdisjoint(id(p) for p in task.parameters())
    optimized = {id(p) for group in trainer.optimizers[0].param_groups for p in group["params"]}
    assert teacher_ids.isdisjoint(optimized)
    assert teacher_ids.isdisjoint(id(w.param) for w in pruner.weights)
    assert len(pruner.weights) == 12 and all(w.name.startswith("model.bert.") for w in pruner.weights)
    assert not any("teacher" in key for key in task.state_dict())
    logged = trainer.callback_metrics
    assert {"train/ce_loss", "train/distill_loss", "train/hidden_loss"} <= set(logged)
    assert logged["train/distill_loss"] > 0 and logged["train/hidden_loss"] > 0


def test_the_classifier_refuses_bad_values(tiny_bert: Path) -> None:
    with pytest.raises(UserError, match="model.distill.temperature must be positive"):
        classifier(tiny_bert, distill={"weight": 0.5, "temperature": 0.0})


def test_no_teacher_when_distillation_is_off(tiny_bert: Path, tmp_path: Path) -> None:
    task = classifier(tiny_bert, distill=None)
    trainer = fit(task, [staged_pruning()], 2, tmp_path)
    assert not task.teacher.ready and "train/distill_loss" not in trainer.callback_metrics


def test_resume_restores_the_teacher_instead_of_snapshotting_the_pruned_model(tiny_bert: Path, tmp_path: Path) -> None:
    L.seed_everything(0)
    checkpoints = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_top_k=-1, filename="e{epoch}", auto_insert_metric_name=False
    )
    first, dense = classifier(tiny_bert), DenseWeights()
    fit(first, [staged_pruning(), dense, checkpoints], 2, tmp_path)  # stops mid stage 0 (epochs 1-2)
    saved = torch.load(tmp_path / "ckpt" / "e1.ckpt", weights_only=False)
    assert same_weights(first.teacher.network, saved[TEACHER_KEY])

    resumed = classifier(tiny_bert)
    resumed.on_pruning_start = lambda: pytest.fail("a resumed stage must not snapshot again")
    fit(resumed, [staged_pruning()], 3, tmp_path, ckpt_path=tmp_path / "ckpt" / "e1.ckpt")
    assert resumed.teacher.ready and same_weights(resumed.teacher.network, dense.state)


def test_a_pruned_checkpoint_without_teacher_is_refused(tiny_bert: Path) -> None:
    task = classifier(tiny_bert)
    task.on_load_checkpoint({"callbacks": {"StagedPruning": {"completed_stage": -1}}})  # dense: snapshot comes later
    assert not task.teacher.ready
    with pytest.raises(UserError, match="pruned without distillation"):
        task.on_load_checkpoint({"callbacks": {"StagedPruning": {"completed_stage": 0}}})
    with pytest.raises(RuntimeError, match="before a snapshot"):
        Teacher()(torch.device("cpu"))

"""Knowledge distillation from the dense network while the pruned one fine-tunes.

Structured patterns remove whole rows and columns at once, and a few epochs on the labels alone may not win
back what that costs. A frozen copy of the network as pruning finds it (the teacher) supplies soft targets
(Hinton et al., 2015) and, optionally, per-layer hidden states to match (as TinyBERT does). Nothing here knows
the task: a classifier snapshots its network with `Teacher`, runs it beside the student and blends the terms
with `DistillConfig.combine`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sparseprune.checkpoints import PRUNING_STATE_KEY
from sparseprune.errors import UserError

TEACHER_KEY = "distill_teacher"  # the teacher's weights in a Lightning checkpoint, beside `state_dict`


@dataclass(frozen=True)
class DistillConfig:
    """How much the teacher counts: loss = (1 - weight) CE + weight T^2 KL + hidden_weight MSE.

    Both weights 0 (the default) switch distillation off, leaving plain cross entropy.
    """

    weight: float = 0.0  # share of the soft-target term, in [0, 1]
    temperature: float = 2.0  # T > 0: softens both logit distributions
    hidden_weight: float = 0.0  # >= 0: weight of the hidden-state MSE, added on top

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise UserError(f"model.distill.weight must lie in [0, 1] (0 = off), got {self.weight}")
        if not self.temperature > 0.0:
            raise UserError(f"model.distill.temperature must be positive, got {self.temperature}")
        if not self.hidden_weight >= 0.0:
            raise UserError(f"model.distill.hidden_weight must be >= 0 (0 = off), got {self.hidden_weight}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> DistillConfig:
        """From the config's `distill` node (None = off); an unknown key is refused by name."""
        values = dict(values or {})
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise UserError(f"model.distill has no key {unknown[0]!r}; it takes weight, temperature, hidden_weight")
        try:
            numbers = {key: float(value) for key, value in values.items()}
        except (TypeError, ValueError):
            raise UserError(f"model.distill values must be numbers, got {values}") from None
        return cls(**numbers)

    @property
    def enabled(self) -> bool:
        return self.weight > 0.0 or self.hidden_weight > 0.0

    def combine(
        self, ce_loss: torch.Tensor, distill_loss: torch.Tensor, hidden_loss: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The training loss from its terms (`distill_loss` already carries T^2, as `soft_target_loss` returns)."""
        loss = (1.0 - self.weight) * ce_loss + self.weight * distill_loss
        return loss if hidden_loss is None else loss + self.hidden_weight * hidden_loss


def soft_target_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 KL(softmax(teacher / T) || softmax(student / T)), mean over the batch of (batch, classes) logits.

    T^2 keeps the term's gradients on the scale of cross entropy's whatever T is.
    """
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return temperature**2 * F.kl_div(student, teacher, reduction="batchmean", log_target=True)


def hidden_state_loss(
    student_hidden: Sequence[torch.Tensor],
    teacher_hidden: Sequence[torch.Tensor],
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean over layers of the MSE between student and teacher hidden states (batch, tokens, width).

    With `token_mask` (batch, tokens) the mean runs over real tokens only: batches are padded to their longest
    sequence, and padding positions carry nothing the classifier reads.
    """
    if len(student_hidden) != len(teacher_hidden) or not student_hidden:
        raise ValueError(f"need matching, non-empty layer lists, got {len(student_hidden)} and {len(teacher_hidden)}")
    losses = []
    for student, teacher in zip(student_hidden, teacher_hidden, strict=True):
        per_token = (student.float() - teacher.float()).pow(2).mean(dim=-1)
        if token_mask is None:
            losses.append(per_token.mean())
        else:
            weights = token_mask.to(per_token.dtype)
            losses.append((per_token * weights).sum() / weights.sum().clamp_min(1.0))
    return torch.stack(losses).mean()


class Teacher:
    """A frozen, eval-mode copy of a network, held outside the module that owns the student.

    A plain object, not a submodule, on purpose: the optimizer (`parameters()`), the pruner (`find_prunable`
    walks `named_modules()`), the module's `state_dict` (so `init_ckpt` and export load as before) and
    Lightning's device moves and train/eval switches never see it. So it follows the student's device on use:
    Lightning restores a checkpoint before it moves the module, so a restored teacher starts on the CPU.
    """

    def __init__(self) -> None:
        self.network: nn.Module | None = None

    @property
    def ready(self) -> bool:
        return self.network is not None

    def snapshot(self, network: nn.Module) -> None:
        """Copy `network` as it is now; later changes to it (training, masks) leave the copy untouched."""
        self.network = _frozen(copy.deepcopy(network))

    @torch.no_grad()
    def __call__(self, device: torch.device, *args: Any, **kwargs: Any) -> Any:
        """The teacher's forward pass on the student's `device`, without autograd."""
        if self.network is None:
            raise RuntimeError("the teacher is used before a snapshot was taken")
        if next(self.network.parameters()).device != device:
            self.network.to(device)
        return self.network(*args, **kwargs)

    def save_into(self, checkpoint: dict[str, Any]) -> None:
        if self.network is not None:
            checkpoint[TEACHER_KEY] = self.network.state_dict()

    def load_from(self, checkpoint: Mapping[str, Any], like: nn.Module) -> None:
        """Restore the teacher a checkpoint carries, shaped like the student `like`.

        A checkpoint saved after pruning started but without a teacher is refused: snapshotting the network now
        would make the already-pruned model its own teacher.
        """
        state = checkpoint.get(TEACHER_KEY)
        if state is not None:
            network = copy.deepcopy(like)
            network.load_state_dict(state)
            self.network = _frozen(network)
            return
        pruning = checkpoint.get("callbacks", {}).get(PRUNING_STATE_KEY) or {}
        if int(pruning.get("completed_stage", -1)) >= 0:
            raise UserError(
                "this checkpoint was pruned without distillation, so it holds no dense teacher; resume it with "
                "model.distill.weight=0 model.distill.hidden_weight=0, or prune again from a dense init_ckpt"
            )


def _frozen(network: nn.Module) -> nn.Module:
    network.eval()
    network.requires_grad_(False)
    return network

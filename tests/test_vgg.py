"""VGG16 builder and ImageClassifier: torchvision compatibility, the small variant, width scaling, bad input."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sparseprune.errors import UserError
from sparseprune.models.image_classifier import ImageClassifier
from sparseprune.models.vgg import build_vgg16, resolve_variant, scaled_channels, vgg16_dense_layers
from sparseprune.pruning.gemm_view import find_prunable


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("batch_norm", [True, False])
def test_imagenet_variant_has_torchvision_names_and_shapes(batch_norm: bool) -> None:
    reference_fn = torchvision.models.vgg16_bn if batch_norm else torchvision.models.vgg16
    with torch.device("meta"):
        reference = reference_fn(weights=None)
        ours = build_vgg16(1000, variant="imagenet", batch_norm=batch_norm)
    assert list(_shapes(ours).items()) == list(_shapes(reference).items())


def test_imagenet_variant_is_torchvision_layer_for_layer() -> None:
    """Same modules in the same order (kernel, padding, pooling, dropout), checked on meta tensors for speed."""
    with torch.device("meta"):
        reference = torchvision.models.vgg16_bn(weights=None)
        ours = build_vgg16(1000, variant="imagenet")
        ours.load_state_dict(reference.state_dict(), assign=True)
        logits = ours(torch.empty(2, 3, 224, 224))
    for part in ("features", "avgpool", "classifier"):
        assert repr(getattr(ours, part)) == repr(getattr(reference, part))
    assert logits.shape == (2, 1000)


@pytest.mark.slow
def test_imagenet_variant_computes_what_torchvision_computes() -> None:
    torch.manual_seed(0)
    reference = torchvision.models.vgg16_bn(weights=None).eval()
    ours = build_vgg16(1000, variant="imagenet").eval()
    ours.load_state_dict(reference.state_dict())
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), reference(images))


@pytest.mark.parametrize(("in_channels", "num_classes"), [(1, 10), (3, 100)])
def test_small_variant_maps_32x32_to_class_logits(in_channels: int, num_classes: int) -> None:
    model = build_vgg16(num_classes, in_channels=in_channels, variant="small", width_multiplier=0.125)
    assert model(torch.randn(4, in_channels, 32, 32)).shape == (4, num_classes)
    linears = [m for m in model.classifier if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 64), (64, num_classes)]


@pytest.mark.parametrize(
    ("channels", "width", "expected"),
    [(64, 1.0, 64), (64, 0.25, 16), (512, 0.1, 48), (64, 0.01, 8), (64, 1.3, 80), (4096, 0.25, 1024)],
)
def test_width_multiplier_rounds_to_multiples_of_8(channels: int, width: float, expected: int) -> None:
    assert scaled_channels(channels, width) == expected


def test_every_scaled_layer_stays_kernel_aligned() -> None:
    model = build_vgg16(10, variant="imagenet", width_multiplier=0.3)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            assert module.out_channels % 8 == 0
        if isinstance(module, nn.Linear) and module.out_features != 10:
            assert module.out_features % 8 == 0
    convs = [m.out_channels for m in model.features if isinstance(m, nn.Conv2d)]
    assert convs == [16, 16, 40, 40, 80, 80, 80, 152, 152, 152, 152, 152, 152]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "resnet"}, "unknown VGG16 variant"),
        ({"width_multiplier": 0.0}, "width_multiplier must be positive"),
        ({"width_multiplier": -1.0}, "width_multiplier must be positive"),
        ({"num_classes": 1}, "num_classes must be at least 2"),
        ({"in_channels": 0}, "in_channels must be at least 1"),
        ({"dropout": 1.0}, "dropout must lie in"),
    ],
)
def test_bad_arguments_raise_user_error(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build_vgg16(**{"num_classes": 10, **kwargs})


def test_auto_variant_follows_image_size() -> None:
    assert resolve_variant("auto", 32) == "small"
    assert resolve_variant("auto", 64) == "small"
    assert resolve_variant("auto", 224) == "imagenet"
    with pytest.raises(UserError, match="at least 32x32"):
        resolve_variant("auto", 28)


def test_default_dense_layers_are_first_conv_and_last_linear() -> None:
    small = build_vgg16(10, width_multiplier=0.125)
    assert vgg16_dense_layers(small) == ["features.0.weight", "classifier.3.weight"]
    with torch.device("meta"):
        large = build_vgg16(10, variant="imagenet", batch_norm=False)
    assert vgg16_dense_layers(large, prefix="net.") == ["net.features.0.weight", "net.classifier.6.weight"]


def _classifier(**kwargs) -> ImageClassifier:
    return ImageClassifier(num_classes=10, in_channels=1, image_size=32, width_multiplier=0.125, **kwargs)


def test_classifier_prunes_all_but_the_default_dense_layers() -> None:
    names = [w.name for w in find_prunable(_classifier(), _classifier().prune_exclude)]
    assert names[0] == "net.features.3.weight" and names[-1] == "net.classifier.0.weight"
    assert len(names) == 12 + 1  # 12 of the 13 convs, the first of the 2 Linears
    assert _classifier(prune_exclude=["net.features.*"]).prune_exclude == ["net.features.*"]


def test_classifier_rebuilds_from_saved_hyperparameters() -> None:
    model = _classifier(dropout=0.2, label_smoothing=0.1)
    rebuilt = ImageClassifier(**model.hparams)
    assert _shapes(rebuilt) == _shapes(model)
    assert rebuilt.prune_exclude == model.prune_exclude
    assert "optimizer" not in model.hparams


def test_classifier_trains_validates_and_tests(tmp_path) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 1, 32, 32), torch.randint(0, 10, (16,)))
    loader = DataLoader(data, batch_size=8)
    model = _classifier()
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(model, loader, loader)
    assert {"train/loss", "val/loss", "val/acc"} <= set(trainer.callback_metrics)
    (result,) = trainer.test(model, loader, verbose=False)
    assert 0.0 <= result["test/acc"] <= 1.0
    assert model.compute_loss(next(iter(loader))).shape == ()


def test_bad_label_smoothing_raises_user_error() -> None:
    with pytest.raises(UserError, match="label_smoothing"):
        _classifier(label_smoothing=1.0)

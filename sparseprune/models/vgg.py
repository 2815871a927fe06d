"""VGG16 (configuration D of Simonyan & Zisserman), the network the TW paper prunes.

Module names follow torchvision (`features.<i>`, `classifier.<i>`) so its ImageNet state dicts load into the
"imagenet" variant at width 1. The "small" variant serves 32x32 inputs (CIFAR, padded Fashion-MNIST): after
the five poolings the map is 1x1, so the classifier is Linear(512w, 512w)-ReLU-Dropout-Linear(512w, classes)
instead of the 25088-4096-4096 head that would dwarf the convolutions.
"""

from __future__ import annotations

import torch
from torch import nn

from sparseprune.errors import UserError

VARIANTS = ("small", "imagenet")
SMALL_MAX_IMAGE_SIZE = 64  # "auto" picks the small head up to this size, the ImageNet head above it
MIN_IMAGE_SIZE = 32  # five 2x2 poolings need at least 32 pixels per side
CHANNEL_ALIGN = 8  # channel counts stay multiples of 8 so every GEMM shape suits tensor-core kernels
VGG16_LAYOUT: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)  # fmt: skip
IMAGENET_HIDDEN = 4096
IMAGENET_POOL = 7


def scaled_channels(channels: int, width_multiplier: float) -> int:
    """`channels * width_multiplier` rounded to a multiple of 8, at least 8."""
    return max(CHANNEL_ALIGN, round(channels * width_multiplier / CHANNEL_ALIGN) * CHANNEL_ALIGN)


def resolve_variant(variant: str, image_size: int) -> str:
    """Map "auto" to a variant by input size; check the name and that the input survives the pools."""
    if image_size < MIN_IMAGE_SIZE:
        raise UserError(
            f"VGG16 pools five times and needs images of at least {MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE}, "
            f"got {image_size}x{image_size}; pad or resize the images"
        )
    if variant == "auto":
        return "small" if image_size <= SMALL_MAX_IMAGE_SIZE else "imagenet"
    _check_variant(variant)
    return variant


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise UserError(f"unknown VGG16 variant {variant!r}; choose one of {', '.join(VARIANTS)} (or auto)")


def _check_args(num_classes: int, in_channels: int, variant: str, width_multiplier: float, dropout: float) -> None:
    _check_variant(variant)
    if num_classes < 2:
        raise UserError(f"num_classes must be at least 2, got {num_classes}")
    if in_channels < 1:
        raise UserError(f"in_channels must be at least 1, got {in_channels}")
    if not width_multiplier > 0:
        raise UserError(f"width_multiplier must be positive, got {width_multiplier}")
    if not 0.0 <= dropout < 1.0:
        raise UserError(f"dropout must lie in [0, 1), got {dropout}")


def _features(in_channels: int, width_multiplier: float, batch_norm: bool) -> nn.Sequential:
    """The 13 3x3 convolutions and 5 max-pools, indexed exactly as torchvision's `make_layers`."""
    layers: list[nn.Module] = []
    channels = in_channels
    for entry in VGG16_LAYOUT:
        if entry == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        out_channels = scaled_channels(int(entry), width_multiplier)
        layers.append(nn.Conv2d(channels, out_channels, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(out_channels))
        layers.append(nn.ReLU(inplace=True))
        channels = out_channels
    return nn.Sequential(*layers)


def _classifier(
    variant: str, feature_dim: int, num_classes: int, width_multiplier: float, dropout: float
) -> nn.Sequential:
    if variant == "small":
        return nn.Sequential(
            nn.Linear(feature_dim, feature_dim),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(feature_dim, num_classes),
        )
    hidden = scaled_channels(IMAGENET_HIDDEN, width_multiplier)
    return nn.Sequential(
        nn.Linear(feature_dim * IMAGENET_POOL * IMAGENET_POOL, hidden),
        nn.ReLU(inplace=True),
        nn.Dropout(p=dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(inplace=True),
        nn.Dropout(p=dropout),
        nn.Linear(hidden, num_classes),
    )


class VGG16(nn.Module):
    """features -> avgpool -> flatten -> classifier, the torchvision forward."""

    def __init__(self, features: nn.Sequential, avgpool: nn.Module, classifier: nn.Sequential) -> None:
        super().__init__()
        self.features = features
        self.avgpool = avgpool
        self.classifier = classifier

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(images)).flatten(1))


def _init_weights(model: nn.Module) -> None:
    """torchvision's initialisation, so training from scratch behaves like the reference."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.01)
            nn.init.zeros_(module.bias)


def build_vgg16(
    num_classes: int,
    in_channels: int = 3,
    variant: str = "small",
    width_multiplier: float = 1.0,
    batch_norm: bool = True,
    dropout: float = 0.5,
) -> nn.Module:
    """VGG16 with every channel count (and the ImageNet hidden width) scaled by `width_multiplier`."""
    _check_args(num_classes, in_channels, variant, width_multiplier, dropout)
    features = _features(in_channels, width_multiplier, batch_norm)
    feature_dim = scaled_channels(int(VGG16_LAYOUT[-2]), width_multiplier)
    pool_size = 1 if variant == "small" else IMAGENET_POOL
    classifier = _classifier(variant, feature_dim, num_classes, width_multiplier, dropout)
    model = VGG16(features, nn.AdaptiveAvgPool2d((pool_size, pool_size)), classifier)
    _init_weights(model)
    return model


def vgg16_dense_layers(model: nn.Module, prefix: str = "") -> list[str]:
    """Parameter-name patterns (fnmatch) of the weights left dense by default: the first convolution, which
    sees raw pixels through few channels, and the last Linear, which maps to the classes; both are small
    and pruning them costs accuracy out of proportion (the usual practice in the pruning literature)."""
    convs = [name for name, module in model.named_modules() if isinstance(module, nn.Conv2d)]
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    return [f"{prefix}{convs[0]}.weight", f"{prefix}{linears[-1]}.weight"]

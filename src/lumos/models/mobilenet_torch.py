"""torchvision's `mobilenet_v2` module layout in plain PyTorch (torchvision is not
installed), written apart from lumos' own: the reference that tests and benchmarks load
the same state dict into (strictly, so a wrong layout fails to load)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                   bias=False), nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
        super().__init__()
        layers = [conv_bn(cin, cin * t, 1)] if t != 1 else []
        self.conv = nn.Sequential(*layers, conv_bn(cin * t, cin * t, 3, stride, cin * t),
                                  nn.Conv2d(cin * t, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.res else self.conv(x)


class TorchMobileNetV2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        self.features = nn.Sequential(*layers, conv_bn(cin, 1280, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


def load(path: str | Path) -> TorchMobileNetV2:
    """The model in eval mode with a torchvision state dict (strict: the layout must match)."""
    m = TorchMobileNetV2().eval()
    m.load_state_dict(torch.load(path, weights_only=True))
    return m

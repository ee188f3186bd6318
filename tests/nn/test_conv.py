"""lumos.nn.conv's formulations (matrix product, sum of shifted products, the functional
fallback) in NCHW and channels-last, against torch.nn.functional.conv2d."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lumos
from lumos import nn
from lumos.egraph import build_spaces
from lumos.errors import ShapeError
from lumos.nn.conv import TAPS_MAX, conv2d
from lumos.runtime.cpu import build as build_program
from lumos.runtime.cpu.kernels import RULES, compose, cpu_space, from_genome, gemm, seeds
from lumos.search import Genomes

# (input NCHW, weight, stride, padding, dilation, groups, bias)
CASES = [
    ((2, 6, 9, 7), (6, 1, 3, 3), 1, 1, 1, 6, True),  # depthwise
    ((2, 6, 9, 7), (6, 1, 3, 3), 2, 1, 1, 6, False),  # depthwise, stride 2, odd sizes
    ((2, 4, 9, 9), (8, 1, 3, 3), 2, 1, 1, 4, True),  # channel multiplier 2
    ((2, 3, 11, 10), (5, 3, 3, 3), 2, 1, 1, 1, True),  # a stem: 27 taps, im2col
    ((2, 4, 9, 9), (6, 2, 3, 3), (2, 1), (1, 0), 1, 2, False),  # grouped, 18 taps
    ((2, 3, 10, 10), (4, 3, 3, 3), 1, 2, 2, 1, True),  # dilated, im2col
    ((2, 4, 7, 7), (4, 4, 3, 1), 1, "same", 1, 1, True),  # 12 taps, 'same', im2col
    ((1, 3, 9, 8), (3, 1, 7, 7), 1, 3, 1, 3, True),  # 7x7 depthwise: 49 taps
    ((1, 4, 8, 8), (6, 4, 1, 1), 1, 0, 1, 1, True),  # 1x1: a matrix product
    ((2, 4, 9, 7), (6, 4, 1, 1), 2, 0, 1, 1, False),  # 1x1, stride 2
    ((2, 40, 6, 5), (8, 40, 1, 1), 1, "valid", 1, 1, False),  # 1x1, many channels
    ((2, 16, 6, 6), (8, 16, 3, 3), 1, 1, 1, 1, True),  # 144 taps: im2col, a matrix product
    ((2, 12, 9, 8), (6, 12, 3, 3), 2, 1, 1, 1, False),  # im2col, stride 2, odd sizes
    ((1, 12, 9, 9), (4, 12, 3, 2), 1, (2, 1), 2, 1, True),  # im2col, dilated, 3x2 kernel
    ((2, 16, 6, 6), (8, 8, 3, 3), 1, 1, 1, 2, False),  # grouped, 72 taps: the functional one
]


def torch_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, case: tuple) -> np.ndarray:
    _, _, s, p, d, g, _ = case
    tb = None if b is None else torch.from_numpy(b)
    return F.conv2d(torch.from_numpy(x), torch.from_numpy(w), tb, s, p, d, g).numpy()


def arrays(case: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    sx, sw, *_, bias = case
    x = rng.standard_normal(sx).astype(np.float32)
    w = rng.standard_normal(sw).astype(np.float32)
    return x, w, rng.standard_normal(sw[0]).astype(np.float32) if bias else None


def build(g: lumos.Graph, case: tuple, channels_last: bool, k: int) -> tuple:
    sx, sw, s, p, d, groups, bias = case
    shape = (sx[0], sx[2], sx[3], sx[1]) if channels_last else sx
    x, w = g.tensor(shape, name=f"x{k}"), g.tensor(sw, name=f"w{k}")
    b = g.tensor((sw[0],), name=f"b{k}") if bias else None
    y = conv2d(x, w, b, s, p, d, groups, channels_last=channels_last).output()
    return x, w, b, y


def feed(prog: lumos.Program, ts: tuple, data: tuple, channels_last: bool) -> None:
    x, w, b, _ = ts
    xa, wa, ba = data
    prog.set_data(x, np.ascontiguousarray(xa.transpose(0, 2, 3, 1)) if channels_last else xa)
    prog.set_data(w, wa)
    if b is not None:
        prog.set_data(b, ba)


def result(prog: lumos.Program, ts: tuple, channels_last: bool) -> np.ndarray:
    y = prog.get(ts[3])
    return y.transpose(0, 3, 1, 2) if channels_last else y


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_against_torch(case: tuple, channels_last: bool) -> None:
    g = lumos.Graph()
    ts = build(g, case, channels_last, 0)
    prog = g.compile(lumos.ReferenceRuntime())
    data = arrays(case, 1)
    feed(prog, ts, data, channels_last)
    prog.execute()
    np.testing.assert_allclose(result(prog, ts, channels_last), torch_conv(*data, case),
                               rtol=1e-5, atol=1e-4)


@pytest.fixture
def cache(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path))


def test_cpu_runtime(cache: None) -> None:
    """Cases of each formulation, both layouts, in one graph on the CPU runtime, run as the
    search's fused + BLAS seed (taps fused into one loop, 1x1 and im2col convolutions as sgemm)."""
    g = lumos.Graph()
    picked = [CASES[k] for k in (0, 1, 2, 3, 9, 10, 11, 12)]
    runs = [(case, cl, build(g, case, cl, k), arrays(case, k))
            for k, (case, cl) in enumerate((c, cl) for cl in (False, True) for c in picked)]
    (space,) = build_spaces(g, [{}], RULES)
    space = cpu_space(space)
    genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
    kernels = from_genome(space, genome, g.dims)
    assert sum(n.op == "Gemm" for n in kernels.nodes) >= 6  # 1x1 and im2col: sgemm
    program = build_program(kernels)
    inputs = {}
    for _, cl, (x, w, b, _), (xa, wa, ba) in runs:
        inputs[g.nodes[x.node].name] = np.ascontiguousarray(xa.transpose(0, 2, 3, 1)) \
            if cl else xa
        inputs[g.nodes[w.node].name] = wa
        if b is not None:
            inputs[g.nodes[b.node].name] = ba
    got = program([inputs[name] for name in program.layout.input_names], {})
    for (case, cl, _, d), y in zip(runs, got, strict=True):
        np.testing.assert_allclose(y.transpose(0, 3, 1, 2) if cl else y, torch_conv(*d, case),
                                   rtol=1e-5, atol=1e-4, err_msg=f"{case} channels_last={cl}")


@pytest.mark.parametrize("channels_last", [False, True])
def test_formulations(channels_last: bool) -> None:
    """A 1x1 convolution is one SumReduce of a product BLAS can take (channels-last: one
    GEMM over all pixels), and so are many taps over windows copied into rows (im2col); a
    few taps are a sum of products (no reduction); a grouped convolution of many taps is
    the functional convolution (one reduction over the flattened window)."""
    for case, want in ((CASES[10], "gemm"), (CASES[11], "gemm"), (CASES[13], "gemm"),
                       (CASES[0], "taps"), (CASES[7], "taps"), (CASES[14], "window")):
        g = lumos.Graph()
        build(g, case, channels_last, 0)
        reds = [n for n in g.nodes if n.op == "SumReduce"]
        if want == "taps":
            taps = int(np.prod(case[1][1:]))
            assert not reds and taps <= TAPS_MAX
            assert sum(n.op == "Mul" for n in g.nodes) >= taps
            continue
        (red,) = reds
        prod = g.nodes[red.inputs[0]]
        assert prod.op == "Mul"
        if want == "window":
            assert red.views[0].shape[-1].value == 8 * 3 * 3
            continue
        views = [compose(("Then", v, ("Top", red.views[0])), {}) for v in prod.views]
        layout = gemm(views, red.axis, {})
        assert layout is not None
        if channels_last:
            assert layout.batch == ()


def test_modules_channels_last() -> None:
    """Conv2d and BatchNorm2d with channels_last bind PyTorch's state dict and agree with
    torch on the permuted data."""
    conv = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, bias=False)
    bn = torch.nn.BatchNorm2d(4).eval()
    for p in (bn.weight, bn.bias, bn.running_mean):
        torch.nn.init.normal_(p)
    bn.running_var.uniform_(0.5, 2.0)

    class Block(nn.Module):
        def __init__(self) -> None:
            self.conv = nn.Conv2d(4, 4, 3, 2, 1, groups=4, bias=False, channels_last=True)
            self.bn = nn.BatchNorm2d(4, channels_last=True)

        def forward(self, t: lumos.Tensor) -> lumos.Tensor:
            return self.bn(self.conv(t))

    state = {f"conv.{k}": v.detach().numpy() for k, v in conv.state_dict().items()} | \
        {f"bn.{k}": v.detach().numpy() for k, v in bn.state_dict().items()
         if not k.endswith("num_batches_tracked")}
    x = np.random.default_rng(3).standard_normal((2, 4, 9, 8)).astype(np.float32)
    g = lumos.Graph()
    t = g.tensor((2, 9, 8, 4), name="x")
    block = Block()
    y = block(t).output()
    prog = g.compile(lumos.ReferenceRuntime())
    nn.load_state(block, prog, state)
    prog.set_data(t, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    prog.execute()
    want = bn(conv(torch.from_numpy(x))).detach().numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(prog.get(y), want, rtol=1e-5, atol=1e-5)


def test_symbolic_batch_and_half() -> None:
    """A dynamic batch (the taps and the GEMM's pixel count are symbolic) and f16 inputs
    (computed in f32, rounded once, like torch on CPU)."""
    g = lumos.Graph()
    g.dim("n", 1, 4)
    x = g.tensor(("n", 7, 6, 4), lumos.f16, name="x")
    wd, wp = g.tensor((4, 1, 3, 3), lumos.f16, name="wd"), g.tensor((5, 4, 1, 1), lumos.f16,
                                                                     name="wp")
    y = conv2d(conv2d(x, wd, None, 2, 1, groups=4, channels_last=True), wp,
               channels_last=True).output()
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(4)
    xa = rng.standard_normal((3, 7, 6, 4)).astype(np.float16)
    wda, wpa = (rng.standard_normal(s).astype(np.float16) for s in ((4, 1, 3, 3), (5, 4, 1, 1)))
    for t, a in ((x, xa), (wd, wda), (wp, wpa)):
        prog.set_data(t, a)
    prog.execute({"n": 3})
    tx = torch.from_numpy(xa.transpose(0, 3, 1, 2).astype(np.float32))
    mid = F.conv2d(tx, torch.from_numpy(wda.astype(np.float32)), None, 2, 1, 1, 4).half()
    want = F.conv2d(mid.float(), torch.from_numpy(wpa.astype(np.float32))).half()
    assert prog.get(y).dtype == np.float16
    np.testing.assert_allclose(prog.get(y).astype(np.float32),
                               want.numpy().transpose(0, 2, 3, 1).astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_errors() -> None:
    g = lumos.Graph()
    w = g.tensor((4, 1, 3, 3))
    with pytest.raises(ShapeError, match="channels-last input must be 4-D"):
        conv2d(g.tensor((5, 5, 4)), w, groups=4, channels_last=True)
    with pytest.raises(ShapeError, match="conv2d"):  # 4 channels in 3 groups
        conv2d(g.tensor((1, 5, 5, 4)), g.tensor((3, 1, 3, 3)), groups=3, channels_last=True)
    with pytest.raises(ShapeError, match="BatchNorm2d: a channels-last input must be 4-D"):
        nn.BatchNorm2d(4, channels_last=True)(g.tensor((5, 4)))

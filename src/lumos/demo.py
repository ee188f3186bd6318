"""`make demo` (first part): a small attention block with a symbolic sequence length,
compiled for the CPU runtime with a timed search (buckets of s: 1..16, 17..512) and
checked against a plain numpy implementation at several lengths. The second part of
`make demo` is `lumos run smollm2 "Once upon a time"`."""

from __future__ import annotations

import math
import time

import numpy as np

import lumos


def build(d: int = 64, heads: int = 4) -> tuple[lumos.Graph, dict[str, lumos.Tensor], lumos.Tensor]:
    g = lumos.Graph()
    g.dim("s", 1, 512)
    x = g.tensor(("s", d), name="x")
    w = {n: g.tensor((d, d), name=n) for n in ("wq", "wk", "wv", "wo")}
    hd = d // heads

    def split_heads(t: lumos.Tensor) -> lumos.Tensor:  # (s, d) -> (heads, s, hd): a view
        return t.reshape("s", heads, hd).transpose(0, 1)

    q, k, v = (split_heads(x @ w[n]) for n in ("wq", "wk", "wv"))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    s = scores.shape[-1]
    mask = g.ones(s, s, dtype=lumos.bool_).tril()
    attn = lumos.where(mask, scores, float("-inf")).softmax(-1)
    out = (attn @ v).transpose(0, 1).reshape("s", d) @ w["wo"]
    return g, {"x": x, **w}, (x + out).output()


def numpy_block(x: np.ndarray, w: dict[str, np.ndarray], heads: int) -> np.ndarray:
    s, d = x.shape
    hd = d // heads
    q, k, v = ((x @ w[n]).reshape(s, heads, hd).transpose(1, 0, 2) for n in ("wq", "wk", "wv"))
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    attn = e / e.sum(-1, keepdims=True)
    return x + (attn @ v).transpose(1, 0, 2).reshape(s, d) @ w["wo"]


def main() -> None:
    d, heads = 64, 4
    t0 = time.perf_counter()
    g, inputs, out = build(d, heads)
    print(f"built an attention block: {len(g.nodes)} HLIR nodes, symbolic dims {g.dims} "
          f"({(time.perf_counter() - t0) * 1e3:.1f} ms)")
    t0 = time.perf_counter()
    opts = lumos.CompileOptions(limit=8, dim_buckets={"s": [(1, 16, 8), (17, 512, 128)]})
    prog = g.compile(lumos.CpuRuntime(), opts)
    print(f"compiled for the cpu runtime, {opts.limit} candidates timed per bucket "
          f"({time.perf_counter() - t0:.1f} s; a second run loads it from the cache)")
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
               for n in ("wq", "wk", "wv", "wo")}
    for n, a in weights.items():
        prog.set_data(inputs[n], a)
    print(f"{'s':>5} {'max |lumos - numpy|':>20} {'ms':>8}")
    for s in (1, 7, 128):
        x = rng.standard_normal((s, d)).astype(np.float32)
        prog.set_data(inputs["x"], x)
        prog.execute()  # s is read off x's shape; the first run also allocates
        t0 = time.perf_counter()
        prog.execute()
        ms = (time.perf_counter() - t0) * 1e3
        err = float(np.abs(prog.get(out) - numpy_block(x, weights, heads)).max())
        print(f"{s:>5} {err:>20.2e} {ms:>8.1f}")
        assert err < 1e-4, f"lumos and numpy disagree at s={s}: {err}"
    print("agreement with numpy: ok")


if __name__ == "__main__":
    main()

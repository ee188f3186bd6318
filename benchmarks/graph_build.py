"""Benchmark: build the graph of a 30-layer SmolLM2-shaped decoder (symbolic seq len).

Target on this machine: under 1 second. Reports the HLIR node count and nodes per
layer. The peer, timed in the same run, is torch.fx tracing the same architecture
(weights on the meta device, so nothing is allocated): both only record a graph.

    .venv/bin/python benchmarks/graph_build.py [--layers 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from smollm2_graph import build  # noqa: E402


def torch_peer(layers: int) -> float | None:
    """Seconds for torch.fx to trace the same decoder (None without torch)."""
    try:
        import torch
        import torch.nn.functional as F
        from torch import fx, nn
    except ImportError:
        return None

    class Block(nn.Module):
        def __init__(self, d: int = 576, nh: int = 9, nkv: int = 3, ffn: int = 1536) -> None:
            super().__init__()
            self.nh, self.nkv, self.hd = nh, nkv, d // nh
            self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, nkv * 64, bias=False)
            self.v, self.o = nn.Linear(d, nkv * 64, bias=False), nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
            self.down = nn.Linear(ffn, d, bias=False)

        def forward(self, x, cos, sin):
            s = x.shape[0]
            h = self.n1(x)
            q = self.q(h).view(s, self.nh, self.hd).transpose(0, 1)
            k = self.k(h).view(s, self.nkv, self.hd).transpose(0, 1)
            v = self.v(h).view(s, self.nkv, self.hd).transpose(0, 1)
            rot = lambda t: t * cos + torch.cat([-t[..., 32:], t[..., :32]], -1) * sin
            a = F.scaled_dot_product_attention(rot(q)[None], rot(k)[None], v[None],
                                               is_causal=True, enable_gqa=True)[0]
            x = x + self.o(a.transpose(0, 1).reshape(s, -1))
            h = self.n2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(49152, 576)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(576)

        def forward(self, tokens, cos, sin):
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x, cos, sin)
            return self.norm(x) @ self.embed.weight.T

    with torch.device("meta"):
        model = Decoder()
    t0 = time.perf_counter()
    fx.symbolic_trace(model)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    t0 = time.perf_counter()
    build(layers=args.layers)  # the first build in this process: cold expression caches
    cold = time.perf_counter() - t0
    times, graph = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        graph, _ = build(layers=args.layers)
        times.append(time.perf_counter() - t0)
    one, _ = build(layers=1)
    zero, _ = build(layers=0)
    assert graph is not None
    per_layer = len(one.nodes) - len(zero.nodes)
    ops = Counter(n.op for n in graph.nodes)
    med = statistics.median(times)
    peer_times = [t for t in (torch_peer(args.layers) for _ in range(args.repeats)) if t]
    peer = statistics.median(peer_times) if peer_times else None
    result = {
        "benchmark": "graph_build", "layers": args.layers, "nodes": len(graph.nodes),
        "nodes_per_layer": per_layer, "cold_s": cold, "median_s": med, "min_s": min(times),
        "target_s": 1.0, "meets_target": cold < 1.0, "ops": dict(ops),
        "peer": "torch.fx.symbolic_trace (meta weights)", "peer_median_s": peer,
        "ratio_peer_over_lumos": None if peer is None else peer / cold,
    }
    print(f"{'layers':>8} {'nodes':>7} {'nodes/layer':>12} {'cold s':>7} {'median s':>9} "
          f"{'min s':>7} target")
    print(f"{args.layers:>8} {len(graph.nodes):>7} {per_layer:>12} {cold:>7.3f} {med:>9.3f} "
          f"{min(times):>7.3f} < 1 s {'ok' if cold < 1.0 else 'MISSED (cold)'}")
    if peer is not None:
        print(f"peer torch.fx trace: {peer:.3f} s; lumos cold build is {peer / cold:.2f}x "
              "the peer's speed")
    print("ops:", ", ".join(f"{k} {v}" for k, v in ops.most_common()))
    out = Path(__file__).resolve().parent / "results" / "graph_build.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

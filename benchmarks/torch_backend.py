"""Benchmark: torch.compile(backend="lumos") against eager PyTorch and inductor.

Forward latency (median) and cold compile time (first call, compile included) of a
tiny Llama (h64, 2 layers, 1x16), a 44M-parameter Llama (h512, 4 layers, 1x128) and a
small CNN (batch 8, 3x224x224), plus generate() tokens/s for the Llamas with
`--generate`. Random weights (transformers configs; nothing is downloaded). Peers run
in the same process, one after another, with the same threads. Target: lumos >= 1.0x
inductor on each, and a cold compile no slower than inductor's.

    .venv/bin/python benchmarks/torch_backend.py [--runtime cpu] [--cases tiny,llama44m,cnn]
        [--repeats 20] [--generate]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import median_time
from torch import nn


def llama(hidden: int, layers: int, heads: int, ffn: int) -> nn.Module:
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=ffn,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=heads, max_position_embeddings=1024)
    return tf.LlamaForCausalLM(cfg).eval()


class CNN(nn.Module):
    """Conv / batch norm / relu stages with max pooling, global average pool, linear."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256), classes: int = 1000):
        super().__init__()
        stages, c = [], 3
        for w in widths:
            stages += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                       nn.ReLU(), nn.MaxPool2d(2)]
            c = w
        self.features = nn.Sequential(*stages)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


CASES: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "tiny": lambda: (llama(64, 2, 4, 172), (torch.randint(0, 32000, (1, 16)),)),
    "llama44m": lambda: (llama(512, 4, 8, 1376), (torch.randint(0, 32000, (1, 128)),)),
    "cnn": lambda: (CNN().eval(), (torch.randn(8, 3, 224, 224),)),
}




def forward(model: nn.Module, args: tuple, backend: str | None, options: dict | None,
            repeats: int) -> dict[str, float]:
    torch._dynamo.reset()
    f = model if backend is None else torch.compile(model, backend=backend, options=options)
    with torch.no_grad():
        t0 = time.perf_counter()
        f(*args)
        cold = time.perf_counter() - t0
        return {"compile_s": cold if backend else 0.0,
                "latency_s": median_time(lambda: f(*args), repeats)}


def generate(model: nn.Module, backend: str | None, options: dict | None,
             tokens: int = 32) -> float:
    torch._dynamo.reset()
    fwd = model.forward
    if backend is not None:
        model.forward = torch.compile(fwd, backend=backend, options=options)
    ids = torch.randint(0, 32000, (1, 8))
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    try:
        with torch.no_grad():
            model.generate(ids, **kw)  # compiles (prefill and decode)
            t0 = time.perf_counter()
            model.generate(ids, **kw)
            return tokens / (time.perf_counter() - t0)
    finally:
        model.forward = fwd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="cpu", choices=["cpu", "reference"])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--generate", action="store_true")
    args = ap.parse_args()
    peers = {"eager": (None, None), "inductor": ("inductor", None),
             "lumos": ("lumos", {"runtime": args.runtime})}
    results: dict[str, Any] = {"benchmark": "torch_backend", "runtime": args.runtime,
                               "threads": torch.get_num_threads(), "cases": {}}
    print(f"{'case':>9} {'peer':>9} {'latency ms':>11} {'compile s':>10} {'tok/s':>7}")
    for name in args.cases.split(","):
        torch.manual_seed(0)
        model, inputs = CASES[name]()
        row: dict[str, Any] = {}
        for peer, (backend, options) in peers.items():
            row[peer] = forward(model, inputs, backend, options, args.repeats)
            if args.generate and name != "cnn":
                row[peer]["tokens_per_s"] = generate(model, backend, options)
            r = row[peer]
            print(f"{name:>9} {peer:>9} {r['latency_s'] * 1e3:>11.2f} {r['compile_s']:>10.1f} "
                  f"{r.get('tokens_per_s', float('nan')):>7.1f}")
        speed = row["inductor"]["latency_s"] / row["lumos"]["latency_s"]
        row["lumos_speed_vs_inductor"] = speed
        row["meets_target"] = speed >= 1.0 and \
            row["lumos"]["compile_s"] <= row["inductor"]["compile_s"]
        print(f"{name:>9} lumos is {speed:.2f}x inductor's speed; target >= 1.0x "
              f"{'met' if row['meets_target'] else 'MISSED'}")
        results["cases"][name] = row
    out = Path(__file__).resolve().parent / "results" / "torch_backend.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

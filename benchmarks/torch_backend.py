"""Benchmark: torch.compile(backend="lumos") against eager PyTorch and inductor.

Forward latency (the median of at least `--repeats` calls and 5 s of calls, after 3
warm-up calls, the peers timed in turns: 5 rounds each; see common.interleaved) and cold
compile time (first call, compile included) of a tiny Llama (h64, 2 layers, 1x16), a
44M-parameter Llama (h512, 4 layers, 1x128) and a small CNN (batch 8, 3x224x224), plus
generate() tokens/s for the Llamas with `--generate` (the median of 3 generate() calls
after the one that compiles, in turns as well). Random weights (transformers configs;
nothing is downloaded). Peers run in the same process with the same threads, glibc's
malloc keeping freed memory (common.keep_freed_memory: PyTorch's per-call tensors are
not faulted in again each call). lumos runs with the backend's default options (runtime
"cpu", a search of `LIMIT` candidates per graph) unless `--runtime` / `--limit` say
otherwise. Each compile starts from empty caches (lumos: kernels and artifacts;
inductor: its FX graph and code caches) unless `--warm`. Target: lumos >= 1.0x inductor
on each, and a cold compile no slower than inductor's.
`--quick` checks the script at small sizes (the 44M Llama shrunk to h128, 2 layers,
1x32; the CNN at batch 2, 3x64x64; 3 repeats; 8 generated tokens) and writes no JSON.
`--matmul-precision high` runs everything under `torch.set_float32_matmul_precision`
("high": lumos may compute float32 products as bf16x3 on AMX tiles; PyTorch's CPU
kernels stay float) and writes `torch_backend_high.json`.

    .venv/bin/python benchmarks/torch_backend.py [--runtime cpu] [--limit N]
        [--cases tiny,llama44m,cnn] [--peers eager,inductor,lumos] [--repeats 20]
        [--generate] [--warm] [--quick] [--matmul-precision highest|high]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import interleaved, keep_freed_memory, openblas_core
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


def ids(seq: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, 32000, (1, seq)),)


# name -> (full size, quick size): the model and its forward arguments
CASES: dict[str, tuple[Callable[[], tuple[nn.Module, tuple]], ...]] = {
    "tiny": (lambda: (llama(64, 2, 4, 172), ids(16)),) * 2,
    "llama44m": (lambda: (llama(512, 4, 8, 1376), ids(128)),
                 lambda: (llama(128, 2, 4, 344), ids(32))),
    "cnn": (lambda: (CNN().eval(), (torch.randn(8, 3, 224, 224),)),
            lambda: (CNN().eval(), (torch.randn(2, 3, 64, 64),))),
}


@contextlib.contextmanager
def caches(root: Path | None) -> Iterator[None]:
    """Empty compile caches (new folders under `root`; None: the usual, warm ones) for the
    duration: a cold compile, as in a fresh process on a fresh machine. The folders stay
    until the run ends: a compiled program may load its library later."""
    if root is None:
        yield
        return
    from torch._inductor.utils import fresh_cache

    old = os.environ.get("LUMOS_CACHE")
    os.environ["LUMOS_CACHE"] = tempfile.mkdtemp(dir=root)
    try:
        with fresh_cache(dir=tempfile.mkdtemp(dir=root), delete=False):
            yield
    finally:
        if old is None:
            del os.environ["LUMOS_CACHE"]
        else:
            os.environ["LUMOS_CACHE"] = old


def compiled(model: nn.Module, args: tuple, backend: str | None, options: dict | None,
             root: Path | None) -> tuple[Callable[[], Any], float]:
    """The model's forward on `args` through `backend` (None: eager), and its cold
    compile time (the first call)."""
    f = model if backend is None else torch.compile(model, backend=backend, options=options)
    with torch.no_grad(), caches(root):
        t0 = time.perf_counter()
        f(*args)
        cold = time.perf_counter() - t0

    def call() -> Any:
        with torch.no_grad():
            return f(*args)
    return call, cold if backend else 0.0


def generator(model: nn.Module, backend: str | None, options: dict | None, tokens: int,
              root: Path | None) -> Callable[[], Any]:
    """A generate() of `tokens` new tokens with the model's forward compiled by `backend`
    (None: eager), compiled here (prefill and decode) by a first call."""
    fwd = type(model).forward.__get__(model)
    peer_fwd = fwd if backend is None else torch.compile(fwd, backend=backend, options=options)
    prompt = ids(8)[0]
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)

    def run() -> Any:
        model.forward = peer_fwd
        try:
            with torch.no_grad():
                return model.generate(prompt, **kw)
        finally:
            del model.forward  # the class's forward again
    with caches(root):
        run()
    return run


def case(name: str, peers: dict[str, tuple], args: argparse.Namespace,
         root: Path | None) -> dict[str, Any]:
    """One model through every peer: a table row each, and the ratio to inductor. Each
    peer compiles first; then all are timed in turns (`common.interleaved`)."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    model, inputs = CASES[name][args.quick]()
    row: dict[str, Any] = {}
    calls = {}
    for peer, (backend, opts) in peers.items():
        calls[peer], cold = compiled(model, inputs, backend, opts, root)
        row[peer] = {"compile_s": cold}
    for peer, t in interleaved(calls, args.repeats, 0.0 if args.quick else 5.0,
                               warmup=3).items():
        row[peer]["latency_s"] = t
    if args.generate and name != "cnn":
        tokens = 8 if args.quick else 32
        runs = {peer: generator(model, backend, opts, tokens, root)
                for peer, (backend, opts) in peers.items()}
        for peer, t in interleaved(runs, 3, rounds=3, warmup=0).items():
            row[peer]["tokens_per_s"] = tokens / t
    for peer, r in row.items():
        print(f"{name:>9} {peer:>9} {r['latency_s'] * 1e3:>11.2f} {r['compile_s']:>10.1f} "
              f"{r.get('tokens_per_s', float('nan')):>7.1f}", flush=True)
    if {"inductor", "lumos"} <= set(row):
        speed = row["inductor"]["latency_s"] / row["lumos"]["latency_s"]
        row["lumos_speed_vs_inductor"] = speed
        row["meets_target"] = speed >= 1.0 and \
            row["lumos"]["compile_s"] <= row["inductor"]["compile_s"]
        print(f"{name:>9} lumos is {speed:.2f}x inductor's speed; target >= 1.0x "
              f"{'met' if row['meets_target'] else 'MISSED'}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=["cpu", "reference"], help="default: the backend's")
    ap.add_argument("--limit", type=int, help="candidates per graph (default: the backend's)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--peers", default="eager,inductor,lumos")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--warm", action="store_true", help="keep the compile caches")
    ap.add_argument("--quick", action="store_true", help="small sizes, no JSON")
    ap.add_argument("--matmul-precision", choices=["highest", "high"], default="highest",
                    help="torch.set_float32_matmul_precision for every peer")
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.matmul_precision)
    keep_freed_memory()
    args.repeats = args.repeats or (3 if args.quick else 20)
    options = {k: v for k, v in (("runtime", args.runtime), ("limit", args.limit))
               if v is not None}
    every = {"eager": (None, None), "inductor": ("inductor", None),
             "lumos": ("lumos", options or None)}
    peers = {p: every[p] for p in args.peers.split(",")}
    # every peer's graphs stay compiled side by side (timed in turns): room in dynamo's
    # per-function cache for them all
    torch._dynamo.config.recompile_limit = 64
    results: dict[str, Any] = {"benchmark": "torch_backend", "lumos_options": options,
                               "matmul_precision": args.matmul_precision,
                               "warm_caches": args.warm, "threads": torch.get_num_threads(),
                               "openblas_core": openblas_core(), "cases": {}}
    print(f"lumos options {options or 'default'}; {'warm' if args.warm else 'cold'} compiles"
          f"; float32 matmul precision {args.matmul_precision}"
          f"{'; quick sizes' if args.quick else ''}; OpenBLAS {results['openblas_core']}")
    print(f"{'case':>9} {'peer':>9} {'latency ms':>11} {'compile s':>10} {'tok/s':>7}")
    with tempfile.TemporaryDirectory(prefix="torch_backend-") as tmp:
        for name in args.cases.split(","):
            results["cases"][name] = case(name, peers, args, None if args.warm else Path(tmp))
    if args.quick:
        print("quick run: no results written")
        return
    suffix = "" if args.matmul_precision == "highest" else f"_{args.matmul_precision}"
    out = Path(__file__).resolve().parent / "results" / f"torch_backend{suffix}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Benchmark: models written without lumos in mind, through torch.compile(backend="lumos")
with its default options, against inductor (and eager) in the same process.

Each model is a transformers config with random weights or a plain `torch.nn` module that
no lumos code was tuned for: a BERT-style encoder, a GPT-2-style decoder, a vision
transformer, a ResNet-style CNN with residual blocks, a ConvNeXt-style block net
(depthwise 7x7 convolutions, layer norm over channels, GELU), an MLP-Mixer, and nanoGPT
(a causal decoder written on `F.scaled_dot_product_attention`). Nothing is downloaded.
Every peer compiles cold first (empty caches: lumos' kernels and artifacts, inductor's FX
graph and code caches), then all are timed in turns (common.interleaved: 5 rounds,
medians). Target (issue 27): geomean >= 1.2x inductor, none below 0.9x; the compile time
of each beside inductor's.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/unseen.py
        [--cases bert,gpt2,...] [--peers eager,inductor,lumos[,seeds,noseeds]]
        [--options '{"limit": 2}']
        [--repeats 20] [--quick]

Peers `seeds` (lumos at `limit` 2: the two seed programs) and `noseeds` (lumos with
`seeds` off: the search from the unfused program) are timed beside the others when asked
for. `--quick` runs every model at small sizes (3 repeats) and writes no JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import interleaved, keep_freed_memory, openblas_core
from torch import nn
from torch_backend import compiled


def bert(quick: bool) -> tuple[nn.Module, tuple]:
    import transformers as tf

    h, layers, seq, batch = (128, 2, 32, 2) if quick else (256, 4, 128, 8)
    cfg = tf.BertConfig(vocab_size=8000, hidden_size=h, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=4 * h,
                        max_position_embeddings=512)
    ids = torch.randint(0, 8000, (batch, seq))
    return tf.BertModel(cfg, add_pooling_layer=False).eval(), (ids, torch.ones_like(ids))


def gpt2(quick: bool) -> tuple[nn.Module, tuple]:
    import transformers as tf

    h, layers, seq = (128, 2, 32) if quick else (384, 6, 128)
    cfg = tf.GPT2Config(vocab_size=8000, n_embd=h, n_layer=layers, n_head=6 if h % 6 == 0
                        else 4, n_positions=512)
    return tf.GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 8000, (1, seq)),)


def vit(quick: bool) -> tuple[nn.Module, tuple]:
    import transformers as tf

    h, layers, image, batch = (96, 2, 64, 1) if quick else (192, 6, 224, 4)
    cfg = tf.ViTConfig(hidden_size=h, num_hidden_layers=layers, num_attention_heads=3,
                       intermediate_size=4 * h, image_size=image, patch_size=16)
    return tf.ViTModel(cfg, add_pooling_layer=False).eval(), \
        (torch.randn(batch, 3, image, image),)


class Residual(nn.Module):
    """A ResNet basic block: two 3x3 convolutions with batch norm, a projected shortcut
    where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, c = [], widths[0]
        for k, w in enumerate(widths):
            blocks += [Residual(c, w, 1 if k == 0 else 2), Residual(w, w, 1)]
            c = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def resnet(quick: bool) -> tuple[nn.Module, tuple]:
    return ResNet().eval(), (torch.randn(2 if quick else 8, 3, 32 if quick else 64,
                                         32 if quick else 64),)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.up = nn.Linear(c, 4 * c)
        self.down = nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.down(F.gelu(self.up(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (48, 96, 192)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 4, 4)]
        for k, w in enumerate(widths):
            if k:
                layers.append(nn.Conv2d(widths[k - 1], w, 2, 2))
            layers += [ConvNeXtBlock(w), ConvNeXtBlock(w)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


def convnext(quick: bool) -> tuple[nn.Module, tuple]:
    return ConvNeXt().eval(), (torch.randn(1 if quick else 4, 3, 64 if quick else 128,
                                           64 if quick else 128),)


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, c: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                 nn.Linear(2 * tokens, tokens))
        self.ch = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self, image: int, patch: int = 8, c: int = 128, depth: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, c, patch, patch)
        tokens = (image // patch) ** 2
        self.blocks = nn.Sequential(*(MixerBlock(tokens, c) for _ in range(depth)))
        self.norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


def mixer(quick: bool) -> tuple[nn.Module, tuple]:
    image = 32 if quick else 64
    return Mixer(image).eval(), (torch.randn(2 if quick else 16, 3, image, image),)


class Attention(nn.Module):
    """nanoGPT's causal self-attention: one fused qkv projection, heads split by view,
    F.scaled_dot_product_attention, heads merged back."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class NanoGPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        return self.head(self.ln(x))


def nanogpt(quick: bool) -> tuple[nn.Module, tuple]:
    d, layers, seq, batch = (64, 2, 16, 1) if quick else (384, 6, 256, 2)
    return NanoGPT(4096, d, layers, 6 if d % 6 == 0 else 4, 512).eval(), \
        (torch.randint(0, 4096, (batch, seq)),)


CASES: dict[str, Callable[[bool], tuple[nn.Module, tuple]]] = {
    "bert": bert, "gpt2": gpt2, "vit": vit, "resnet": resnet, "convnext": convnext,
    "mixer": mixer, "nanogpt": nanogpt,
}


def case(name: str, peers: dict[str, tuple], args: argparse.Namespace,
         root: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model, inputs = CASES[name](args.quick)
    row: dict[str, Any] = {}
    calls = {}
    for peer, (backend, opts) in peers.items():
        calls[peer], cold = compiled(model, inputs, backend, opts, root)
        row[peer] = {"compile_s": cold}
    with torch.no_grad():
        want = model(*inputs)
        want = want[0] if isinstance(want, tuple) else getattr(want, "last_hidden_state",
                                                              getattr(want, "logits", want))
        for peer, call in calls.items():
            got = call()
            got = got[0] if isinstance(got, tuple) else getattr(got, "last_hidden_state",
                                                               getattr(got, "logits", got))
            row[peer]["max_abs_error"] = float((got - want).abs().max())
    for peer, t in interleaved(calls, args.repeats, 0.0 if args.quick else 3.0,
                               warmup=2).items():
        row[peer]["latency_s"] = t
    for peer, r in row.items():
        print(f"{name:>9} {peer:>9} {r['latency_s'] * 1e3:>11.2f} {r['compile_s']:>10.1f} "
              f"{r['max_abs_error']:>9.1e}", flush=True)
    if {"inductor", "lumos"} <= set(row):
        row["lumos_speed_vs_inductor"] = row["inductor"]["latency_s"] / row["lumos"]["latency_s"]
        print(f"{name:>9} lumos is {row['lumos_speed_vs_inductor']:.2f}x inductor's speed")
    for other in ("seeds", "noseeds"):
        if {other, "lumos"} <= set(row):
            row[f"{other}_speed_vs_lumos"] = r = \
                row["lumos"]["latency_s"] / row[other]["latency_s"]
            print(f"{name:>9} {other} run at {r:.2f}x lumos' speed")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--peers", default="eager,inductor,lumos")
    ap.add_argument("--options", default="", help="lumos options as JSON (default: none)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--quick", action="store_true", help="small sizes, no JSON")
    args = ap.parse_args()
    keep_freed_memory()
    args.repeats = args.repeats or (3 if args.quick else 20)
    options = json.loads(args.options) if args.options else None
    every = {"eager": (None, None), "inductor": ("inductor", None),
             "lumos": ("lumos", options),  # and two other lumos peers, to ask for:
             "seeds": ("lumos", {**(options or {}), "limit": 2}),  # the seeds alone,
             "noseeds": ("lumos", {**(options or {}), "seeds": False})}  # no seeds
    peers = {p: every[p] for p in args.peers.split(",")}
    torch._dynamo.config.recompile_limit = 64
    results: dict[str, Any] = {"benchmark": "unseen", "lumos_options": options,
                               "threads": torch.get_num_threads(),
                               "openblas_core": openblas_core(),
                               "date": time.strftime("%Y-%m-%d"), "cases": {}}
    print(f"lumos options {options or 'default'}; cold compiles"
          f"{'; quick sizes' if args.quick else ''}; OpenBLAS {results['openblas_core']}")
    print(f"{'case':>9} {'peer':>9} {'latency ms':>11} {'compile s':>10} {'max err':>9}")
    with tempfile.TemporaryDirectory(prefix="unseen-") as tmp:
        for name in args.cases.split(","):
            results["cases"][name] = case(name, peers, args, Path(tmp))
    speeds = [r["lumos_speed_vs_inductor"] for r in results["cases"].values()
              if "lumos_speed_vs_inductor" in r]
    if speeds:
        geo = math.exp(sum(map(math.log, speeds)) / len(speeds))
        results["geomean_vs_inductor"], results["min_vs_inductor"] = geo, min(speeds)
        print(f"geomean {geo:.2f}x inductor (target >= 1.2x), lowest {min(speeds):.2f}x "
              "(target >= 0.9x)")
    if args.quick:
        print("quick run: no results written")
        return
    out = Path(__file__).resolve().parent / "results" / "unseen.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Train a small character-level transformer language model with lumos.autograd.

Two pre-norm transformer layers (causal self-attention + GELU MLP), learned token and
position embeddings, a final layer norm and an untied head, trained with AdamW on a
corpus generated from a tiny grammar (no data file). The loss is cross-entropy built so
its gradient is cheap: `log_softmax`, then the target's log-probability picked with a
one-hot comparison of the targets against `arange(vocab)`, summed over the vocabulary.
Forward, backward and update are one compiled program. Prints the loss curve and a
greedy sample.

    python examples/train_lm.py --runtime cpu --steps 150
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from plot import save_curve

import lumos
from lumos.autograd import AdamW, Trainer
from lumos.frontend import nn

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "a small bird", "the king"]
VERBS = ["sees", "likes", "finds", "follows", "paints", "feeds"]
OBJECTS = ["the moon", "a red ball", "the river", "an apple", "the garden", "a green hat"]


def corpus(sentences: int = 400, seed: int = 0) -> str:
    """Sentences `subject verb object.` drawn from a fixed word list."""
    rng = np.random.default_rng(seed)
    return " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."
                    for _ in range(sentences))


@dataclass(frozen=True)
class Config:
    vocab: int
    ctx: int = 32
    dim: int = 48
    heads: int = 4
    layers: int = 2


def shapes(c: Config) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape."""
    d = c.dim
    out = {"emb": (c.vocab, d), "pos": (c.ctx, d)}
    for i in range(c.layers):
        out |= {f"{i}.ln1w": (d,), f"{i}.ln1b": (d,), f"{i}.qkv": (3 * d, d),
                f"{i}.out": (d, d), f"{i}.ln2w": (d,), f"{i}.ln2b": (d,),
                f"{i}.fc": (4 * d, d), f"{i}.fcb": (4 * d,), f"{i}.proj": (d, 4 * d),
                f"{i}.projb": (d,)}
    return out | {"lnfw": (d,), "lnfb": (d,), "head": (c.vocab, d)}


def init(c: Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """GPT-2 style: normal(0, 0.02) weights, unit layer-norm scales, zero biases."""
    out = {}
    for k, s in shapes(c).items():
        if k.endswith(("ln1w", "ln2w", "lnfw")):
            out[k] = np.ones(s, np.float32)
        elif len(s) == 1:
            out[k] = np.zeros(s, np.float32)
        else:
            out[k] = rng.normal(0, 0.02, s).astype(np.float32)
    return out


LUMOS = SimpleNamespace(linear=nn.linear, layer_norm=nn.layer_norm, embedding=nn.embedding,
                        attention=nn.scaled_dot_product_attention, gelu=lumos.gelu)


def torch_ops() -> SimpleNamespace:
    """The same functions from PyTorch (imported only when asked for)."""
    import torch.nn.functional as F

    return SimpleNamespace(linear=F.linear, layer_norm=F.layer_norm, embedding=F.embedding,
                           attention=F.scaled_dot_product_attention, gelu=F.gelu)


def logits(c: Config, P: dict, tok: Any, f: SimpleNamespace) -> Any:
    """(batch, ctx) token ids -> (batch, ctx, vocab) next-token logits."""
    b, d = tok.shape[0], c.dim
    x = f.embedding(tok, P["emb"]) + P["pos"]
    for i in range(c.layers):
        h = f.layer_norm(x, (d,), P[f"{i}.ln1w"], P[f"{i}.ln1b"])
        q, k, v = f.linear(h, P[f"{i}.qkv"]).split(d, -1)
        heads = [t.reshape(b, c.ctx, c.heads, d // c.heads).transpose(1, 2) for t in (q, k, v)]
        # contiguous: the heads' outputs copied into rows (torch's reshape copies too), so
        # the output projection and its weight gradient are plain matrix products
        a = f.attention(*heads, is_causal=True).transpose(1, 2).contiguous().reshape(b, c.ctx, d)
        x = x + f.linear(a, P[f"{i}.out"])
        h = f.layer_norm(x, (d,), P[f"{i}.ln2w"], P[f"{i}.ln2b"])
        x = x + f.linear(f.gelu(f.linear(h, P[f"{i}.fc"], P[f"{i}.fcb"])), P[f"{i}.proj"],
                         P[f"{i}.projb"])
    return f.linear(f.layer_norm(x, (d,), P["lnfw"], P["lnfb"]), P["head"])


def cross_entropy(z: Any, onehot: Any) -> Any:
    """Mean of -log_softmax(z)[target], the target given as a one-hot float mask."""
    return -(z.log_softmax(-1) * onehot).sum(-1).mean()


def build(c: Config, batch: int) -> tuple[lumos.Graph, dict, Any, Any, Any, Any]:
    """The lumos graph: (graph, params, tokens input, targets input, logits, loss)."""
    g = lumos.Graph()
    P = {k: g.tensor(s, lumos.f32, name=k) for k, s in shapes(c).items()}
    tok = g.tensor((batch, c.ctx), lumos.i64, name="tok")
    tgt = g.tensor((batch, c.ctx), lumos.i64, name="tgt")
    z = logits(c, P, tok, LUMOS)
    onehot = (tgt.unsqueeze(-1) == lumos.arange(g, c.vocab)).to(lumos.f32)
    return g, P, tok, tgt, z, cross_entropy(z, onehot)


def torch_loss(c: Config, P: dict, tok: Any, tgt: Any, f: SimpleNamespace | None = None) -> Any:
    """The same loss in PyTorch (P: name -> torch tensor; f: `torch_ops()`)."""
    import torch.nn.functional as F

    z = logits(c, P, tok, f or torch_ops())
    return cross_entropy(z, F.one_hot(tgt, c.vocab).float())


def batches(ids: np.ndarray, ctx: int, batch: int, rng: np.random.Generator):
    """Endless random (tokens, next tokens) windows of the encoded corpus."""
    while True:
        s = rng.integers(0, len(ids) - ctx - 1, batch)[:, None] + np.arange(ctx)
        yield ids[s], ids[s + 1]


def runtime(name: str) -> Any:
    return lumos.CpuRuntime() if name == "cpu" else lumos.ReferenceRuntime()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", choices=["reference", "cpu"], default="cpu")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--sample", type=int, default=80, help="characters to generate")
    ap.add_argument("--png", default=None, help="write the loss curve to this PNG")
    args = ap.parse_args()
    text = corpus()
    chars = sorted(set(text))
    ids = np.array([chars.index(ch) for ch in text], np.int64)
    c = Config(vocab=len(chars))
    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    g, P, tok, tgt, z, loss = build(c, args.batch)
    z.output()
    trainer = Trainer(loss, AdamW(list(P.values()), lr=args.lr), runtime(args.runtime))
    trainer.load({P[k]: a for k, a in init(c, rng).items()})
    print(f"{len(text)} characters, vocab {c.vocab}, {sum(a.size for a in init(c, rng).values())}"
          f" parameters; graph {g.count()} nodes, compiled in {time.perf_counter() - t0:.1f}s")

    data, start = batches(ids, c.ctx, args.batch, rng), time.perf_counter()
    curve = []
    for step in range(args.steps):
        x, y = next(data)
        value = float(trainer.step({tok: x, tgt: y}))
        curve.append(value)
        if step % max(args.steps // 10, 1) == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {value:.4f}")
    print(f"{args.steps / (time.perf_counter() - start):.1f} steps/s on the {args.runtime} "
          "runtime")
    if args.png:
        save_curve(curve, args.png, "cross-entropy")
        print(f"wrote {args.png}")

    # greedy sampling: a forward-only program for one window, loaded with the trained weights
    _, Q, qtok, qtgt, qz, _ = build(c, 1)
    sampler = qz.output().graph.compile(runtime(args.runtime))
    for k, t in Q.items():
        sampler.set_data(t, trainer.get(P[k]))
    out = [chars.index(ch) for ch in "the cat "]
    for _ in range(args.sample):
        w = out[-c.ctx:]
        window = np.zeros((1, c.ctx), np.int64)
        window[0, :len(w)] = w
        sampler.set_data(qtok, window)
        sampler.set_data(qtgt, window)  # the graph also holds the (unused) loss
        sampler.execute()
        out.append(int(sampler.get(qz)[0, len(w) - 1].argmax()))
    print("sample:", repr("".join(chars[i] for i in out)))


if __name__ == "__main__":
    main()

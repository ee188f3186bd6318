"""Train an MLP on a synthetic three-arm spiral with lumos.autograd and AdamW.

Forward, backward and the optimizer update are one compiled lumos program; each step
binds the updated weights back as inputs. Prints the loss curve (and with --png writes
it to a PNG).

    python examples/train_mlp.py --steps 300 --png mlp_loss.png
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from plot import save_curve

import lumos
from lumos.autograd import AdamW, Trainer
from lumos.frontend import nn


def spiral(n: int, classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points per class on `classes` interleaved noisy spiral arms in the plane."""
    r = np.tile(np.linspace(0.05, 1.0, n), classes)
    label = np.repeat(np.arange(classes), n)
    angle = label * 2 * np.pi / classes + r * 5.0 + rng.normal(0, 0.2, n * classes)
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], 1).astype(np.float32)
    return x, label.astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--png", default=None, help="write the loss curve to this PNG")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    data, labels = spiral(100, 3, rng)

    g = lumos.Graph()
    x, y = g.tensor(("batch", 2), name="x"), g.tensor(("batch",), lumos.i64, name="y")
    shapes = {"w1": (args.hidden, 2), "b1": (args.hidden,), "w2": (args.hidden, args.hidden),
              "b2": (args.hidden,), "w3": (3, args.hidden), "b3": (3,)}
    p = {k: g.tensor(s, name=k) for k, s in shapes.items()}
    h = nn.linear(x, p["w1"], p["b1"]).relu()
    h = nn.linear(h, p["w2"], p["b2"]).relu()
    logits = nn.linear(h, p["w3"], p["b3"]).output()
    loss = -logits.log_softmax(-1).gather(1, y.unsqueeze(1)).mean()

    trainer = Trainer(loss, AdamW(list(p.values()), lr=args.lr))
    trainer.load({t: (rng.standard_normal(t.shape) / np.sqrt(t.shape[-1])).astype(np.float32)
                  for t in p.values()})
    print(f"graph: {g.count()} nodes (forward, backward and AdamW in one program)")
    curve, start = [], time.perf_counter()
    for step in range(args.steps):
        curve.append(float(trainer.step({x: data, y: labels})))
        if step % max(args.steps // 15, 1) == 0 or step == args.steps - 1:
            acc = (trainer.program.get(logits).argmax(-1) == labels).mean()
            print(f"step {step:4d}  loss {curve[-1]:.4f}  accuracy {acc:.2f}")
    print(f"{args.steps / (time.perf_counter() - start):.1f} steps/s on the reference runtime")
    if args.png:
        save_curve(curve, args.png, "cross-entropy")
        print(f"wrote {args.png}")

if __name__ == "__main__":
    main()

"""examples/train_lm.py: its model trains (the loss falls over a few AdamW steps) and its
loss curve matches PyTorch's for the same initial weights and batches, on the reference
and the CPU runtime (whose persisted updates are written in place between steps)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import lumos
from lumos.autograd import AdamW, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_lm  # noqa: E402

C = train_lm.Config(vocab=11, ctx=8, dim=16, heads=2, layers=2)


@pytest.mark.parametrize("runtime", [lumos.ReferenceRuntime, lumos.CpuRuntime])
def test_lm_steps_reduce_loss_and_match_torch(runtime: type) -> None:
    rng = np.random.default_rng(0)
    g, P, tok, tgt, _, loss = train_lm.build(C, batch=3)
    trainer = Trainer(loss, AdamW(list(P.values()), lr=0.01), runtime(),
                      lumos.CompileOptions(limit=0))  # (the CPU runtime: no search)
    init = train_lm.init(C, rng)
    trainer.load({P[k]: a for k, a in init.items()})
    tp = {k: torch.tensor(a, requires_grad=True) for k, a in init.items()}
    topt = torch.optim.AdamW(list(tp.values()), lr=0.01)
    x = rng.integers(0, C.vocab, (3, C.ctx))
    y = np.roll(x, -1, 1)
    curve, want = [], []
    for _ in range(6):
        curve.append(float(trainer.step({tok: x, tgt: y})))
        topt.zero_grad()
        tloss = train_lm.torch_loss(C, tp, torch.tensor(x), torch.tensor(y))
        tloss.backward()
        topt.step()
        want.append(tloss.item())
    np.testing.assert_allclose(curve[0], want[0], rtol=1e-4)
    np.testing.assert_allclose(curve, want, rtol=1e-3)
    assert curve[-1] < curve[0] - 0.1
    assert all(b < a for a, b in zip(curve, curve[1:], strict=False))


def test_corpus_and_batches() -> None:
    text = train_lm.corpus(50)
    assert text.endswith(".") and len(set(text)) < 40
    ids = np.arange(100)
    x, y = next(train_lm.batches(ids, 8, 4, np.random.default_rng(0)))
    assert x.shape == y.shape == (4, 8) and (y == x + 1).all()

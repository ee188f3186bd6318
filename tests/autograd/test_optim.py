"""Optimizers and the training driver against torch.optim: SGD variants and AdamW on a
small MLP (100 steps of the loss curve), one AdamW step of a tiny transformer block,
a batch dim that changes between steps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lumos
from lumos.autograd import SGD, AdamW, Trainer
from lumos.frontend import nn
from tests.helpers import assert_close

F32 = lumos.f32
LUMOS = SimpleNamespace(linear=nn.linear, layer_norm=nn.layer_norm, embedding=nn.embedding,
                        attention=nn.scaled_dot_product_attention, gelu=lumos.gelu)
TORCH = SimpleNamespace(linear=F.linear, layer_norm=F.layer_norm, embedding=F.embedding,
                        attention=F.scaled_dot_product_attention, gelu=F.gelu)


def nll(logits: Any, target: Any) -> Any:
    """Mean negative log-likelihood of `target` (cross entropy), the same code for both."""
    return -logits.log_softmax(-1).gather(-1, target.unsqueeze(-1)).mean()


def mlp(P: dict, x: Any, y: Any, f: SimpleNamespace) -> Any:
    return nll(f.linear(f.linear(x, P["w1"], P["b1"]).tanh(), P["w2"], P["b2"]), y)


MLP = {"w1": (8, 4), "b1": (8,), "w2": (3, 8), "b2": (3,)}


def setup(shapes: dict, batch: tuple, rng: np.random.Generator, dims: dict | None = None):
    """Graph parameters and torch leaves holding the same random values."""
    g = lumos.Graph()
    for name, (lo, hi) in (dims or {}).items():
        g.dim(name, lo, hi)
    params = {k: g.tensor(s, F32, name=k) for k, s in shapes.items()}
    init = {k: rng.uniform(-0.5, 0.5, s).astype(np.float32) for k, s in shapes.items()}
    torch_params = {k: torch.tensor(a, requires_grad=True) for k, a in init.items()}
    x, y = g.tensor((*batch, 4), F32, name="x"), g.tensor(batch, lumos.i64, name="y")
    return g, params, init, torch_params, x, y


def compare(trainer: Trainer, params: dict, torch_params: dict, rtol: float = 1e-5) -> None:
    for k, p in params.items():
        want = torch_params[k].detach()
        assert_close(trainer.get(p), want, F32, rtol=rtol, atol=rtol * float(want.abs().max()))


@pytest.mark.parametrize("kw", [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.1, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01},
    {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
])
def test_sgd_steps_match_torch(kw: dict) -> None:
    rng = np.random.default_rng(0)
    g, params, init, tp, x, y = setup(MLP, (6,), rng)
    opt = SGD(list(params.values()), **kw)
    trainer = Trainer(mlp(params, x, y, LUMOS), opt)
    trainer.load({params[k]: a for k, a in init.items()})
    topt = torch.optim.SGD(list(tp.values()), **kw)
    for _ in range(3):
        X, Y = rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)
        loss = trainer.step({x: X, y: Y})
        topt.zero_grad()
        tloss = mlp(tp, torch.tensor(X), torch.tensor(Y), TORCH)
        tloss.backward()
        topt.step()
        assert_close(loss, tloss, F32)
        compare(trainer, params, tp)


def test_adamw_mlp_loss_curve_matches_torch() -> None:
    """100 AdamW steps on a fixed synthetic classification batch: the same loss curve."""
    rng = np.random.default_rng(1)
    g, params, init, tp, x, y = setup(MLP, (16,), rng)
    X = rng.standard_normal((16, 4)).astype(np.float32)
    Y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)
    trainer = Trainer(mlp(params, x, y, LUMOS), AdamW(list(params.values()), lr=0.02))
    trainer.load({params[k]: a for k, a in init.items()})
    topt = torch.optim.AdamW(list(tp.values()), lr=0.02)
    curve, want = [], []
    for _ in range(100):
        curve.append(float(trainer.step({x: X, y: Y})))
        topt.zero_grad()
        tloss = mlp(tp, torch.tensor(X), torch.tensor(Y), TORCH)
        tloss.backward()
        topt.step()
        want.append(tloss.item())
    np.testing.assert_allclose(curve, want, rtol=1e-4, atol=1e-5)
    assert curve[-1] < 0.5 * curve[0]
    compare(trainer, params, tp, rtol=1e-4)


V, T, D, HEADS = 11, 5, 8, 2
BLOCK = {"emb": (V, D), "pos": (T, D), "ln1w": (D,), "ln1b": (D,), "qkv": (3 * D, D),
         "out": (D, D), "ln2w": (D,), "ln2b": (D,), "fc": (4 * D, D), "fcb": (4 * D,),
         "proj": (D, 4 * D), "projb": (D,), "head": (V, D)}


def block(P: dict, tok: Any, tgt: Any, f: SimpleNamespace) -> Any:
    """A pre-norm transformer block with causal attention and a language-model loss."""
    b = tok.shape[0]
    x = f.embedding(tok, P["emb"]) + P["pos"]
    q, k, v = f.linear(f.layer_norm(x, (D,), P["ln1w"], P["ln1b"]), P["qkv"]).split(D, -1)
    heads = [t.reshape(b, T, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v)]
    a = f.attention(*heads, is_causal=True).transpose(1, 2).reshape(b, T, D)
    x = x + f.linear(a, P["out"])
    h = f.gelu(f.linear(f.layer_norm(x, (D,), P["ln2w"], P["ln2b"]), P["fc"], P["fcb"]))
    x = x + f.linear(h, P["proj"], P["projb"])
    return nll(f.linear(x, P["head"]), tgt)


def test_adamw_transformer_step_matches_torch() -> None:
    rng = np.random.default_rng(2)
    g = lumos.Graph()
    params = {k: g.tensor(s, F32, name=k) for k, s in BLOCK.items()}
    init = {k: rng.uniform(-0.4, 0.4, s).astype(np.float32) for k, s in BLOCK.items()}
    for k in ("ln1w", "ln2w"):
        init[k] += 1
    tok, tgt = g.tensor((2, T), lumos.i64), g.tensor((2, T), lumos.i64)
    trainer = Trainer(block(params, tok, tgt, LUMOS), AdamW(list(params.values()), lr=0.01))
    trainer.load({params[k]: a for k, a in init.items()})
    tp = {k: torch.tensor(a, requires_grad=True) for k, a in init.items()}
    topt = torch.optim.AdamW(list(tp.values()), lr=0.01)
    for _ in range(2):
        TOK, TGT = rng.integers(0, V, (2, T)), rng.integers(0, V, (2, T))
        loss = trainer.step({tok: TOK, tgt: TGT})
        topt.zero_grad()
        tloss = block(tp, torch.tensor(TOK), torch.tensor(TGT), TORCH)
        tloss.backward()
        topt.step()
        assert_close(loss, tloss, F32)
        compare(trainer, params, tp)


def test_batch_dim_changes_between_steps() -> None:
    """One compiled training step over a symbolic batch `b`, run at b = 3, 7, 3."""
    rng = np.random.default_rng(3)
    g, params, init, tp, x, y = setup(MLP, ("b",), rng, {"b": (1, 8)})
    trainer = Trainer(mlp(params, x, y, LUMOS), SGD(list(params.values()), lr=0.1,
                                                     momentum=0.9))
    trainer.load({params[k]: a for k, a in init.items()})
    topt = torch.optim.SGD(list(tp.values()), lr=0.1, momentum=0.9)
    for n in (3, 7, 3):
        X, Y = rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)
        assert_close(trainer.step({x: X, y: Y}), mlp(tp, torch.tensor(X), torch.tensor(Y),
                                                     TORCH), F32)
        topt.zero_grad()
        mlp(tp, torch.tensor(X), torch.tensor(Y), TORCH).backward()
        topt.step()
        compare(trainer, params, tp)


def test_optimizer_errors() -> None:
    g = lumos.Graph()
    w = g.tensor((2, 2), F32)
    with pytest.raises(ValueError, match="parameter 0 must be a float graph input"):
        SGD([w * 2])
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([w], nesterov=True)
    with pytest.raises(ValueError, match="float graph input"):
        AdamW([g.tensor((2,), lumos.i32)])

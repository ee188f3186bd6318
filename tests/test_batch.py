"""Batched generation (`lumos.batch.Batch`): sequences opened, prefilled, stepped together
and closed in an interleaved order give, at every step, transformers' logits of each
sequence alone; the per-row causal mask equals the single-sequence one row by row."""

from __future__ import annotations

import numpy as np
import pytest

import lumos
from lumos.batch import Batch
from lumos.generate import ContextError
from lumos.models import llama
from lumos.nn.layers import causal_bias, row_causal_mask
from lumos.runtime.cpu import CpuRuntime
from lumos.search import CompileOptions
from tests.models.test_llama import dense_state, hf_logits, hf_model


def batch(runtime, options, slots: int = 3) -> tuple[Batch, object]:
    m = hf_model(tie=False, seed=1)
    config = llama.LlamaConfig.from_hf(m.config.to_dict())
    model = llama.Llama(config, max_context=24, batch=slots)
    return Batch(model, dense_state(m), runtime, max_prefill=4, options=options), m


@pytest.mark.parametrize("runtime", ["reference", "cpu"])
def test_interleaved_sequences_equal_each_alone(runtime):
    rt = lumos.ReferenceRuntime() if runtime == "reference" else CpuRuntime()
    b, m = batch(rt, CompileOptions(limit=0) if runtime == "cpu" else CompileOptions())
    text: dict[int, list[int]] = {}
    rng = np.random.default_rng(0)

    def check(seq: int, logits: np.ndarray) -> None:
        np.testing.assert_allclose(logits, hf_logits(m, text[seq])[-1], rtol=1e-4,
                                   atol=1e-4, err_msg=f"sequence {seq}")

    def start(prompt: list[int]) -> int:
        seq = b.open()
        text[seq] = list(prompt)
        check(seq, b.feed(seq, prompt))
        return seq

    def step() -> None:
        tokens = {q: int(rng.integers(64)) for q in b.open_sequences}
        for q, t in tokens.items():
            text[q].append(t)
        for q, logits in b.step(tokens).items():
            check(q, logits)

    a = start([5, 17, 63])
    step()
    c = start([1, 2, 3, 4, 5, 6, 7])  # longer than the prefill bucket: in chunks
    step()
    step()
    b.close(a)  # c moves into row 0
    d = start([9, 9])
    e = start([40, 41, 42, 43, 44])  # full: 3 slots
    with pytest.raises(RuntimeError, match="all 3 sequences"):
        b.open()
    step()
    b.close(d)
    text[c] += [11, 12]  # more of c's prompt, between steps
    check(c, b.feed(c, [11, 12]))
    step()
    assert b.length(c) == len(text[c]) and b.length(e) == len(text[e])
    with pytest.raises(ContextError, match="exceed the context of 24"):
        b.feed(e, [1] * 20)
    with pytest.raises(ValueError, match="one token for each open sequence"):
        b.step({c: 1})


@pytest.mark.parametrize("window", [None, 3])
def test_row_causal_mask_equals_the_single_sequence_mask(window):
    g = lumos.Graph()
    g.dim("b", 1, 4)
    starts = g.tensor(("b",), lumos.i64, name="starts")
    positions = starts.reshape(-1, 1) + lumos.arange(g, 0, 3).reshape(1, 3)
    rows = row_causal_mask(positions, 9, window).output()
    singles = {p: causal_bias(g, 3, 9, p, window).output() for p in (0, 2, 6)}
    prog = g.compile(lumos.ReferenceRuntime())
    prog.set_data(starts, np.array([0, 2, 6]))
    prog.execute()
    for r, p in enumerate((0, 2, 6)):
        np.testing.assert_array_equal(prog.get(rows)[r, 0], prog.get(singles[p]) == 0)

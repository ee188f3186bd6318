"""Batched generation: many sequences decoded in one step, each at its own length (the
continuous batching of `lumos serve`).

One program over three dims: `b`, the sequences fed at once; `s`, the tokens fed per
sequence; `p`, the longest of their contexts. Each open sequence holds a row of the
model's KV cache (`Llama(..., batch=slots)`); the open sequences are kept in rows
0..n-1, so a step feeds the first n rows. A sequence is prefilled alone in row 0 (b = 1,
s = its chunk), the one there moved to a free row first; a decode step feeds every open
sequence one token (s = 1, b = n). Moving a sequence copies the filled part of its rows
(its length x the cache's bytes per token), never the whole capacity. The buckets: one
sequence decoding, several decoding, one prefilling; each its own search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lumos.dtype import i64
from lumos.generate import ContextError, steps
from lumos.graph import Graph
from lumos.nn import carries, carry_over, load_state
from lumos.runtime import ReferenceRuntime
from lumos.search import CompileOptions
from lumos.shape import sym


class Batch:
    """A causal LM built with a KV cache of `slots` rows (`Llama(..., batch=slots)`),
    compiled to decode up to `slots` sequences at once. `open()` a sequence, `feed` it
    its prompt (the logits after its last token), then `step` all open sequences one
    token each; `close` frees its row."""

    def __init__(self, model: Any, state: Any, runtime: Any = None, *, max_prefill: int = 512,
                 options: CompileOptions | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        say = progress or (lambda _: None)
        self.model, self.max_context = model, model.max_context
        self.slots = model.cache[0].k.shape[0]
        self.max_prefill = min(max_prefill, self.max_context)
        g = Graph()
        g.dim("b", 1, self.slots)
        g.dim("s", 1, self.max_prefill)
        g.dim("p", 0, self.max_context - 1)
        self.tokens = g.tensor(("b", "s"), i64, name="tokens")
        self.starts = g.tensor(("b",), i64, name="starts")
        self.logits = model(self.tokens, sym("p"), starts=self.starts).output()
        one = (1, 1, 1)  # (b, s, p): see generate.steps
        (step, past), *prompt = steps(self.max_prefill, self.max_context)
        joint = [(one, step, past)]
        if self.slots > 1:
            joint.append(((2, self.slots, min(8, self.slots)), step, past))
        joint += [(one, s, p) for s, p in prompt]
        opts = dataclasses.replace(options or CompileOptions(),
                                   dim_buckets={("b", "s", "p"): joint})
        rt = runtime or ReferenceRuntime()
        say(f"compiling {len(g.nodes)} nodes for the {rt.name} runtime, {self.slots} "
            "sequences at once (" + (f"search limit {opts.limit}, {len(joint)} buckets)"
                                     if opts.limit else "no search)"))
        self.program = g.compile(rt, opts)
        say("binding weights")
        self.weight_bytes = load_state(model, self.program, state)
        self._carries = carries(model, g)
        self._rows: list[int] = []  # row -> the sequence in it
        self._length: dict[int, int] = {}  # sequence -> tokens in its rows of the cache
        self._next = 0

    # -- sequences ---------------------------------------------------------------------
    @property
    def open_sequences(self) -> list[int]:
        """The open sequences, in the order their rows hold them."""
        return list(self._rows)

    def length(self, seq: int) -> int:
        """The tokens of `seq` in the cache."""
        return self._length[self._check(seq)]

    def open(self) -> int:
        """A new, empty sequence (its id); RuntimeError when all `slots` rows are held."""
        if len(self._rows) == self.slots:
            raise RuntimeError(f"all {self.slots} sequences of the batch are open")
        seq, self._next = self._next, self._next + 1
        self._rows.append(seq)
        self._length[seq] = 0
        return seq

    def close(self, seq: int) -> None:
        """Free the row of `seq`: the last row's sequence moves into it."""
        r = self._rows.index(self._check(seq))
        last = len(self._rows) - 1
        if r != last:
            self._copy(last, r, self._length[self._rows[last]])
            self._rows[r] = self._rows[last]
        self._rows.pop()
        del self._length[seq]

    def feed(self, seq: int, ids: Sequence[int]) -> np.ndarray:
        """The logits after the last of `ids`, fed to `seq` after its context (alone, in
        chunks of the prefill bucket)."""
        n, done = len(ids), self._length[self._check(seq)]
        if n == 0:
            raise ContextError("no tokens to feed")
        if done + n > self.max_context:
            raise ContextError(f"{done} + {n} tokens exceed the context of "
                               f"{self.max_context} tokens")
        r = self._rows.index(seq)
        if r != 0:  # into row 0 (the rows of b = 1); row 0's sequence to row r
            other = self._rows[0]
            self._swap(0, r, self._length[other], done)
            self._rows[0], self._rows[r] = seq, other
        for i in range(0, n, self.max_prefill):
            chunk = ids[i:i + self.max_prefill]
            logits = self._run(np.asarray([chunk], np.int64),
                               np.asarray([self._length[seq]], np.int64))
            self._length[seq] += len(chunk)
        return logits[0].copy()

    def step(self, tokens: Mapping[int, int]) -> dict[int, np.ndarray]:
        """One token fed to each open sequence (`tokens` holds one for every one of them,
        each already fed its prompt): the logits after it, by sequence."""
        if set(tokens) != set(self._rows):
            raise ValueError(f"step: one token for each open sequence {sorted(self._rows)}, "
                             f"got {sorted(tokens)}")
        lengths = [self._length[q] for q in self._rows]
        if min(lengths, default=1) == 0:
            raise ContextError("step: a sequence has no context yet; feed it its prompt")
        full = [q for q, n in zip(self._rows, lengths, strict=True) if n >= self.max_context]
        if full:
            raise ContextError(f"step: sequence {full[0]} fills the context of "
                               f"{self.max_context} tokens")
        logits = self._run(np.asarray([[tokens[q]] for q in self._rows], np.int64),
                           np.asarray(lengths, np.int64))
        for q in self._rows:
            self._length[q] += 1
        return {q: logits[r].copy() for r, q in enumerate(self._rows)}

    # -- the program and the cache rows ------------------------------------------------
    def _run(self, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
        self.program.set_data(self.tokens, tokens)
        self.program.set_data(self.starts, starts)
        self.program.execute(dims={"p": int(starts.max())})
        carry_over(self.model, self.program, self._carries)
        return self.program.get(self.logits)

    def _caches(self) -> list[np.ndarray]:
        """The cache arrays the next run reads, (slots, heads, positions, head_dim) each."""
        return [self.program.bound(t) for t, _ in self._carries]

    def _copy(self, src: int, dst: int, n: int) -> None:
        for a in self._caches():
            a[dst, :, :n] = a[src, :, :n]

    def _swap(self, r: int, q: int, nr: int, nq: int) -> None:
        for a in self._caches():
            keep = a[r, :, :nr].copy()
            a[r, :, :nq] = a[q, :, :nq]
            a[q, :, :nr] = keep

    def _check(self, seq: int) -> int:
        if seq not in self._length:
            raise KeyError(f"sequence {seq} is not open")
        return seq

"""Text generation: one compiled program for prefill and decode, sampling, chat prompts,
streamed text.

The program has two symbolic dims: `s`, the tokens fed at once (a prompt, or 1 while
decoding), and `p`, the tokens already in the KV cache. It is compiled once and reused at
every step. With `CompileOptions`, buckets split `s` into decode (s = 1) and prefill
(2..max_prefill), each with its own saturated e-graph and search; without, the runtime
compiles its default program (no search) for all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lumos.dtype import i64
from lumos.errors import LumosError
from lumos.graph import Graph
from lumos.nn import carries, carry_over, load_state
from lumos.runtime import ReferenceRuntime
from lumos.search import CompileOptions
from lumos.shape import sym


class ContextError(LumosError, ValueError):
    """Tokens that do not fit: none at all, or more tokens than the context holds."""


@dataclass(frozen=True)
class Sampling:
    """temperature 0 is greedy; top_k 0 and top_p 1 disable those filters; a
    repetition_penalty > 1 discourages tokens already in the context (as transformers)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None


def probabilities(logits: np.ndarray, history: Sequence[int], s: Sampling) -> np.ndarray:
    """The distribution the next token is drawn from (temperature > 0): repetition
    penalty, temperature, top-k, top-p, in transformers' order."""
    x = _penalized(logits, history, s) / s.temperature
    if 0 < s.top_k < x.size:
        x[x < np.partition(x, -s.top_k)[-s.top_k]] = -np.inf
    p = np.exp(x - x.max())
    p /= p.sum()
    if s.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]  # mass of the more likely tokens
        p[order[before >= s.top_p]] = 0.0
        p /= p.sum()
    return p


def _penalized(logits: np.ndarray, history: Sequence[int], s: Sampling) -> np.ndarray:
    x = logits.astype(np.float64)
    if s.repetition_penalty != 1.0 and len(history):
        seen = np.unique(np.asarray(history))
        v = x[seen]
        x[seen] = np.where(v > 0, v / s.repetition_penalty, v * s.repetition_penalty)
    return x


def sample(logits: np.ndarray, history: Sequence[int], s: Sampling,
           rng: np.random.Generator) -> int:
    """The next token: the most likely one (temperature 0), else a draw from
    `probabilities`."""
    if s.temperature <= 0:
        return int(np.argmax(_penalized(logits, history, s)))
    p = probabilities(logits, history, s)
    return int(rng.choice(p.size, p=p))


def steps(max_prefill: int, max_context: int) -> list[tuple[tuple[int, int, int], ...]]:
    """The joint buckets of new tokens `s` and cached ones `p` (p + s <= max_context): a
    decode step (s = 1) timed with the cache full, its attention at its longest; a prompt
    (s > 1) timed at 128 tokens (or all it may have) into an empty cache, as a
    conversation's first prompt is fed."""
    out = [((1, 1, 1), (0, max_context - 1, max_context - 1))]
    if max_prefill > 1:
        out.append(((2, max_prefill, min(128, max_prefill)), (0, max_context - 2, 0)))
    return out


class Generator:
    """A causal LM (e.g. `lumos.models.llama.Llama`) compiled for generation: call it with
    the next token ids to get the logits after the last one. `state` binds the weights."""

    def __init__(self, model: Any, state: Any, runtime: Any = None, *, max_prefill: int = 512,
                 options: CompileOptions | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        say = progress or (lambda _: None)
        self.model, self.max_context = model, model.max_context
        self.max_prefill = min(max_prefill, self.max_context)
        g = Graph()
        g.dim("s", 1, self.max_prefill)
        g.dim("p", 0, self.max_context - 1)
        self.tokens = g.tensor((1, "s"), i64, name="tokens")
        self.logits = model(self.tokens, sym("p")).output()
        opts = dataclasses.replace(options or CompileOptions(),
                                   dim_buckets={("s", "p"): steps(self.max_prefill,
                                                                 self.max_context)})
        rt = runtime or ReferenceRuntime()
        say(f"compiling {len(g.nodes)} nodes for the {rt.name} runtime (" +
            (f"search limit {opts.limit}, buckets of s: 1, 2..{self.max_prefill})"
             if opts.limit else "no search)"))
        self.program = g.compile(rt, opts)
        say("binding weights")
        self.weight_bytes = load_state(model, self.program, state)
        self._carries = carries(model, g)
        self.pos = 0

    def reset(self) -> None:
        """Forget the context (the cache beyond `pos` is never read)."""
        self.pos = 0

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        """The logits after the last of `ids`, fed after the context so far. More tokens
        than the largest prefill bucket are fed in chunks of it (llama.cpp's `n_batch`)."""
        n = len(ids)
        if n == 0:
            raise ContextError("no tokens to feed")
        if self.pos + n > self.max_context:
            raise ContextError(f"{self.pos} + {n} tokens exceed the context of "
                               f"{self.max_context} tokens")
        for i in range(0, n, self.max_prefill):
            chunk = ids[i:i + self.max_prefill]
            self.program.set_data(self.tokens, np.asarray([chunk], np.int64))
            self.program.execute(dims={"p": self.pos})
            carry_over(self.model, self.program, self._carries)
            self.pos += len(chunk)
        return self.program.get(self.logits)[0].copy()

    def generate(self, prompt: Sequence[int], max_tokens: int, sampling: Sampling = Sampling(),
                 stop: Collection[int] = ()) -> Iterator[int]:
        """Tokens after `prompt` (continuing the context), one at a time, until a `stop`
        token (not yielded), `max_tokens`, or a full context."""
        rng = np.random.default_rng(sampling.seed)
        history = list(prompt)
        logits = self(prompt)
        for i in range(max_tokens):
            t = sample(logits, history, sampling, rng)
            if t in stop:
                return
            yield t
            history.append(t)
            if i + 1 == max_tokens or self.pos >= self.max_context:
                return
            logits = self([t])


class TextStream:
    """Incremental detokenization: `push(token)` returns the text it completes (held back
    while the bytes so far end inside a UTF-8 character)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.ids, self.done = tokenizer, [], 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        new, self.done = text[self.done:], len(text)
        return new


def chat_prompt(template: str, user: str, bos_token: str = "", eos_token: str = "",
                system: str | None = None) -> str:
    """A single-turn chat rendered with the model's Jinja chat template, as transformers
    renders it (ending with the assistant's turn opened)."""
    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]
    return render_chat(template, messages, bos_token, eos_token)


def render_chat(template: str, messages: Sequence[Mapping[str, Any]], bos_token: str = "",
                eos_token: str = "") -> str:
    """`messages` ({"role", "content"} each) rendered with a Jinja chat template, as
    transformers renders them, the assistant's turn opened."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(f"chat template: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=list(messages),
                                                add_generation_prompt=True,
                                                bos_token=bos_token, eos_token=eos_token)
    except TemplateError as e:
        raise ValueError(f"chat template: {e}") from None

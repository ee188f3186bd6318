"""Hugging Face transformers models (small configs, random weights) through the lumos
backend: forward outputs match eager, generate() gives the same tokens. On both runtimes:
"cpu" (the default: generated C, a timed search per graph) and the numpy "reference"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from lumos.torch import cache
from tests.torch.harness import assert_same

tf = pytest.importorskip("transformers")

COMMON = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=64)


def model(name: str) -> Any:
    torch.manual_seed(0)
    if name == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **COMMON))
    if name == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2, **COMMON))
    if name == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=4,
                                                      **COMMON))
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4,
                                                n_positions=64))
    return tf.BertModel(tf.BertConfig(**COMMON))


@pytest.fixture(autouse=True)
def fresh(capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    torch._dynamo.reset()
    cache.clear()
    yield
    torch._dynamo.reset()
    assert "[lumos] warning" not in capfd.readouterr().err  # nothing fell back


RUNTIMES = pytest.mark.parametrize("runtime", ["cpu", "reference"])


@RUNTIMES
@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "gpt2", "bert"])
def test_forward_with_padding_mask(name: str, runtime: str) -> None:
    m = model(name).eval()
    ids = torch.randint(0, 97, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, 5:] = 0
    with torch.no_grad():
        want = m(input_ids=ids, attention_mask=mask)[0]
        f = torch.compile(m, backend="lumos", options={"runtime": runtime})
        got = f(input_ids=ids, attention_mask=mask)[0]
    assert_same(got, want, atol=1e-5)


@RUNTIMES
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_generate_with_a_compiled_forward(cache_implementation: str | None,
                                          runtime: str) -> None:
    m = model("llama").eval()
    ids = torch.randint(0, 97, (1, 5))
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0,
              cache_implementation=cache_implementation)
    with torch.no_grad():
        want = m.generate(ids, **kw)
        m.forward = torch.compile(m.forward, backend="lumos", options={"runtime": runtime})
        got = m.generate(ids, **kw)
    assert torch.equal(got, want)
    assert cache.stats["misses"] > 0  # it did compile (a prefill and a decode graph at least)

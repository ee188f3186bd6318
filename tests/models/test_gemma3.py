"""Gemma 3 270M from a real GGUF file (Q4_K_M: Q5_0, Q4_K, Q6_K and Q8_0 matrices; the
pinned chunk packages): greedy generation of 16 tokens and the logits of every step equal
transformers' Gemma3ForCausalLM loaded from the same file (its dequantized weights are
the reference), on the same token ids: transformers' own GGUF tokenizer for Gemma splits
words into letters (tests/io/test_tokenizers.py), so both take lumos' ids, which equal
SentencePiece's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lumos.generate import Generator
from lumos.io import WeightError
from lumos.models import llama
from lumos.runtime import ReferenceRuntime
from lumos.search import CompileOptions

# prompt: (tokens compared, the text's start); the numpy reference runtime takes ~3 s a
# token of this vocabulary (262,144)
PROMPTS = {"The capital of France is": (16, " the capital of the country of France. It is"),
           "def fibonacci(n):": (4, "\n")}
N_TOKENS = max(n for n, _ in PROMPTS.values())


@pytest.fixture(scope="module")
def gemma3():
    try:
        return llama.load(llama.gemma3_path(), max_context=64)
    except WeightError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference(gemma3):
    """Per prompt: its ids, transformers' greedy tokens and per-step logits."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(gemma3.path.parent, gguf_file=gemma3.path.name,
                                             dtype=torch.float32, attn_implementation="eager")
    assert type(m).__name__ == "Gemma3ForCausalLM"
    out = {}
    for prompt in PROMPTS:
        ids = gemma3.tokenizer.encode(prompt).ids
        with torch.no_grad():
            g = m.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                           max_new_tokens=N_TOKENS, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, pad_token_id=0)
        out[prompt] = ids, g.sequences[0, len(ids):].tolist(), torch.cat(g.logits).numpy()
    return out


@pytest.mark.slow
def test_gemma3_file_greedy_text_and_logits_equal_transformers(gemma3, reference):
    gen = Generator(gemma3.model, gemma3.state, ReferenceRuntime(), max_prefill=16,
                    options=CompileOptions())
    for prompt, (n, start) in PROMPTS.items():
        ids, want_tokens, want_logits = reference[prompt]
        assert ids[0] == 2  # <bos>, as the file's add_bos_token says
        gen.reset()
        logits, tokens = gen(ids), []
        for step in range(n):
            rel = np.abs(logits - want_logits[step]).max() / np.abs(want_logits[step]).max()
            assert rel < 1e-4, f"{prompt!r} step {step}: logits differ by {rel:.2e}"
            tokens.append(int(np.argmax(logits)))
            assert tokens == want_tokens[:step + 1], prompt
            if step + 1 < n:
                logits = gen([tokens[-1]])
        text = gemma3.tokenizer.decode(tokens, skip_special_tokens=True)
        assert text.startswith(start), (prompt, text)

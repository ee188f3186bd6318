"""Generation: sampling against transformers' logits processors, the generate loop on a
tiny random Llama (greedy = argmax chain, stop tokens, seeds, context limits), streamed
text and the chat template."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig as HFConfig
from transformers import LlamaForCausalLM
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lumos.generate import (
    ContextError,
    Generator,
    Sampling,
    TextStream,
    chat_prompt,
    probabilities,
    sample,
    steps,
)
from lumos.io import WeightError
from lumos.models import llama
from lumos.search import CompileOptions

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("s", [Sampling(0.7), Sampling(1.3, top_k=5), Sampling(1.0, top_p=0.8),
                               Sampling(0.9, top_k=20, top_p=0.5, repetition_penalty=1.3)])
def test_probabilities_match_transformers(s):
    logits = (RNG.standard_normal(100) * 3).astype(np.float32)
    history = [3, 3, 50, 97, 12]
    scores, ids = torch.from_numpy(logits)[None].double(), torch.tensor([history])
    procs = [RepetitionPenaltyLogitsProcessor(s.repetition_penalty),
             TemperatureLogitsWarper(s.temperature)]
    procs += [TopKLogitsWarper(s.top_k)] if s.top_k else []
    procs += [TopPLogitsWarper(s.top_p)] if s.top_p < 1 else []
    for p in procs:
        scores = p(ids, scores)
    want = scores.softmax(-1)[0].numpy()
    np.testing.assert_allclose(probabilities(logits, history, s), want, atol=1e-12)


def test_sample_greedy_and_seeded():
    logits = np.array([0.1, 2.0, 1.9, -1.0], np.float32)
    assert sample(logits, [], Sampling(), np.random.default_rng(0)) == 1
    assert sample(logits, [1], Sampling(repetition_penalty=1.2), np.random.default_rng(0)) == 2
    s = Sampling(1.0, top_k=2)
    draws = [sample(logits, [], s, np.random.default_rng(7)) for _ in range(5)]
    assert len(set(draws)) == 1 and draws[0] in (1, 2)  # same seed, same draw
    many = {sample(logits, [], s, np.random.default_rng(i)) for i in range(50)}
    assert many == {1, 2}  # top-k keeps exactly the two best


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    m = LlamaForCausalLM(HFConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64,
                                  tie_word_embeddings=True,
                                  attn_implementation="eager")).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.5)
    state = {k.removeprefix("model."): v.numpy() for k, v in m.state_dict().items()
             if k != "lm_head.weight"}
    model = llama.Llama(llama.LlamaConfig.from_hf(m.config.to_dict()), max_context=12)
    return m, Generator(model, state, max_prefill=6, options=CompileOptions())


def test_decode_is_timed_with_the_cache_full_and_a_prompt_into_an_empty_one(tiny):
    assert steps(6, 12) == [((1, 1, 1), (0, 11, 11)), ((2, 6, 6), (0, 10, 0))]
    assert steps(1, 12) == [((1, 1, 1), (0, 11, 11))]
    timed_at = [{d: b.representative for d, b in c.items()} for c in tiny[1].program.buckets]
    assert timed_at == [{"s": 1, "p": 11}, {"s": 6, "p": 0}]


def test_generate_greedy_stop_seed_and_limits(tiny):
    m, gen = tiny
    prompt = [1, 2, 3, 4]
    with torch.no_grad():
        want = m.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4),
                          max_new_tokens=5, do_sample=False, pad_token_id=0)[0, 4:].tolist()
    gen.reset()
    assert list(gen.generate(prompt, 5)) == want
    gen.reset()
    assert list(gen.generate(prompt, 5, stop={want[2]})) == want[:2]  # stop token not yielded
    runs = []
    for seed in (3, 3, 4):
        gen.reset()
        runs.append(list(gen.generate(prompt, 6, Sampling(1.5, seed=seed))))
    assert runs[0] == runs[1] != runs[2]
    gen.reset()
    assert len(list(gen.generate(prompt, 100))) == 12 - 4 + 1  # stops when the context is full
    for n in (7, 11):  # longer than the largest prefill bucket (6): fed as 6 + 1 and 6 + 5
        gen.reset()
        with torch.no_grad():
            want = m(torch.tensor([list(range(n))])).logits[0, -1].numpy()
        np.testing.assert_allclose(gen(list(range(n))), want, rtol=1e-4, atol=1e-4)
        assert gen.pos == n
    gen.reset()
    gen(list(range(6)))
    gen(list(range(6)))
    with pytest.raises(ContextError, match="12 \\+ 1 tokens exceed the context of 12"):
        gen([1])
    gen.reset()
    with pytest.raises(ContextError, match="0 \\+ 13 tokens exceed the context of 12"):
        gen(list(range(13)))
    assert gen.pos == 0  # nothing fed


@pytest.fixture(scope="module")
def smollm2_gguf():
    try:
        return llama.GGUFFile(llama.smollm2_path())
    except WeightError as e:
        pytest.skip(str(e))


def test_text_stream_and_chat_template(smollm2_gguf):
    tok = smollm2_gguf.tokenizer()
    text = "Once upon a time: 你好, café 😀!"
    ids = tok.encode(text).ids
    stream = TextStream(tok)
    pieces = [stream.push(t) for t in ids]
    assert "".join(pieces) == text and "" in pieces  # held back inside a character
    got = chat_prompt(smollm2_gguf.metadata["tokenizer.chat_template"],
                      "What is the capital of France?", "<|im_start|>", "<|im_end|>")
    assert got == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                   "by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of "
                   "France?<|im_end|>\n<|im_start|>assistant\n")  # transformers' rendering

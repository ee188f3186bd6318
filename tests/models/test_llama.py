"""Llama: a tiny random model against transformers (dense, and through a GGUF file with
llama.cpp's rotary permutation and packed weights), the KV cache against full recompute,
and SmolLM2-135M (GGUF Q4_1) greedy generation against transformers (slow)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from transformers import LlamaConfig as HFConfig
from transformers import LlamaForCausalLM

import lumos
from lumos.generate import Generator
from lumos.io import GGUFFile, WeightError
from lumos.models import llama
from lumos.nn import load_state
from lumos.search import CompileOptions

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rope_theta=500.0, rms_norm_eps=1e-5)


def hf_model(tie: bool, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    m = LlamaForCausalLM(HFConfig(**TINY, tie_word_embeddings=tie,
                                  attn_implementation="eager")).eval()
    for p in m.parameters():  # larger than the default init: a test that can fail
        torch.nn.init.normal_(p, std=0.3)
    return m


def hf_logits(m: LlamaForCausalLM, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def dense_state(m: LlamaForCausalLM) -> dict[str, np.ndarray]:
    tie = m.config.tie_word_embeddings
    return {k.removeprefix("model."): v.numpy() for k, v in m.state_dict().items()
            if not (tie and k == "lm_head.weight")}


IDS = [5, 17, 63, 0, 42, 42, 9, 31, 2, 60]


@pytest.mark.parametrize("tie", [True, False])
def test_kv_cache_decode_equals_full_recompute_and_transformers(tie):
    m = hf_model(tie)
    config = llama.LlamaConfig.from_hf(m.config.to_dict())
    model = llama.Llama(config, max_context=16)
    want = hf_logits(m, IDS)

    gen = Generator(model, dense_state(m), max_prefill=4, options=CompileOptions())
    steps = [gen(IDS[:3])] + [gen([t]).copy() for t in IDS[3:]]
    np.testing.assert_allclose(np.stack(steps), want[2:], rtol=1e-4, atol=1e-4)

    g = lumos.Graph()  # no cache: every prefix recomputed from scratch
    tokens = g.tensor((1, "s"), lumos.i64, name="tokens")
    out = model(tokens, 0, use_cache=False).output()
    prog = g.compile(lumos.ReferenceRuntime())
    load_state(model, prog, dense_state(m))
    for n in range(3, len(IDS) + 1):
        prog.set_data(tokens, np.array([IDS[:n]]))
        prog.execute()
        np.testing.assert_allclose(steps[n - 3], prog.get(out)[0], rtol=1e-5, atol=1e-5)


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's permutation of q/k rows (what unpermute_rows undoes)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def test_gguf_llama_with_packed_weights(tmp_path):
    """A tiny Llama written as GGUF like llama.cpp does (q/k permuted; Q8_0, Q4_0 and Q4_1
    matrices): lumos' logits equal transformers' on the dequantized weights."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    m = hf_model(tie=False, seed=1)
    c = m.config
    w = gguf.GGUFWriter(tmp_path / "tiny.gguf", "llama")
    for key, v in (("block_count", 2), ("context_length", 64), ("embedding_length", 32),
                   ("feed_forward_length", 64), ("attention.head_count", 4),
                   ("attention.head_count_kv", 2), ("vocab_size", 64)):
        w.add_uint32(f"llama.{key}", v)
    w.add_float32("llama.rope.freq_base", 500.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    kinds = [Q.Q8_0, Q.Q4_0, Q.Q4_1]
    gguf_names = {v: k for k, v in llama.GGUF_NAMES.items()}
    layer_names = {v: k for k, v in llama.GGUF_LAYER_NAMES.items()}
    ref = {}
    for i, (name, t) in enumerate(dense_state(m).items()):
        a = t.astype(np.float32)
        base = name.removesuffix(".weight")
        if base.startswith("layers."):
            _, n, rest = base.split(".", 2)
            gname = f"blk.{n}.{layer_names[rest]}.weight"
        else:
            gname = f"{gguf_names[base]}.weight"
        heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}.get(
            base.split(".")[-1])
        stored = llama_cpp_permute(a, heads) if heads else a
        if a.ndim == 1:
            w.add_tensor(gname, stored)
            ref[name] = a
        else:
            kind = kinds[i % 3]
            w.add_tensor(gname, gguf.quants.quantize(stored, kind), raw_dtype=kind)
            ref[name] = gguf.quants.dequantize(gguf.quants.quantize(a, kind), kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    f = GGUFFile(tmp_path / "tiny.gguf")
    config = llama.LlamaConfig.from_gguf(f)
    from_hf = llama.LlamaConfig.from_hf(c.to_dict())
    assert config.rms_norm_eps == pytest.approx(from_hf.rms_norm_eps)  # stored as f32
    assert dataclasses.replace(from_hf, rms_norm_eps=config.rms_norm_eps, bos_token_id=None,
                               eos_token_id=None) == config
    state, formats = llama.gguf_state(f, config)
    assert sorted(set(formats.values())) == ["Q4_0", "Q4_1", "Q8_0", "f32"]
    gen = Generator(llama.Llama(config, formats, max_context=16), state, max_prefill=16)
    m.load_state_dict({("model." + k if k != "lm_head.weight" else k): torch.from_numpy(v)
                       for k, v in ref.items()})
    np.testing.assert_allclose(gen(IDS), hf_logits(m, IDS)[-1], rtol=1e-4, atol=1e-4)


def test_hf_folder_bf16(tmp_path):
    """A Hugging Face folder (bf16 safetensors, tokenizer.json, chat template): weights
    bind as bf16 bit patterns, the model computes in f32 like transformers' default."""
    from tokenizers import Tokenizer, models

    m = hf_model(tie=False, seed=2)
    with torch.no_grad():
        for p in m.parameters():  # the values bf16 holds (the rope buffer stays f32)
            p.copy_(p.bfloat16().float())
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    Tokenizer(models.WordLevel({"a": 0}, unk_token="a")).save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    pre = llama.load(tmp_path, max_context=16)
    assert pre.chat_template == "{{ messages }}" and pre.tokenizer.encode("a").ids == [0]
    assert {p.fmt for _, p in pre.model.named_parameters()} == {"bf16", "f32"}
    gen = Generator(pre.model, pre.state, max_prefill=16)
    np.testing.assert_allclose(gen(IDS), hf_logits(m, IDS)[-1], rtol=1e-4, atol=1e-4)


def test_bad_llama_files(tmp_path):
    with pytest.raises(WeightError, match="nothing.gguf: no such weight file"):
        llama.load(tmp_path / "nothing.gguf")
    with pytest.raises(WeightError, match="not a model folder"):
        llama.load(tmp_path)


# -- SmolLM2-135M-Instruct, Q4_1 ----------------------------------------------------------

PROMPT = "Once upon a time, there was a little"
N_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2():
    try:
        return llama.load(llama.smollm2_path(), max_context=64)
    except WeightError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' greedy tokens and per-step logits on the same GGUF (its dequantized
    weights are the reference; ~15 s, once per session)."""
    ids = smollm2.tokenizer.encode(PROMPT).ids
    m = LlamaForCausalLM.from_pretrained(smollm2.path.parent, gguf_file=smollm2.path.name,
                                         dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        out = m.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                         max_new_tokens=N_TOKENS, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=2)
    return ids, out.sequences[0, len(ids):].tolist(), torch.cat(out.logits).numpy()


def runtimes() -> list:
    cpu = pytest.param("cpu", marks=pytest.mark.skipif(
        not _cpu_available(), reason="lumos.runtime.cpu is not available"))
    return ["reference", cpu]


def _cpu_available() -> bool:
    try:
        from lumos.runtime.cpu import CpuRuntime  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("runtime", runtimes())
def test_smollm2_greedy_matches_transformers(smollm2, reference, runtime):
    from lumos.runtime import CpuRuntime, ReferenceRuntime

    ids, want_tokens, want_logits = reference
    rt, opts = (CpuRuntime(), CompileOptions(limit=0)) if runtime == "cpu" else \
        (ReferenceRuntime(), CompileOptions())
    gen = Generator(smollm2.model, smollm2.state, rt, max_prefill=16, options=opts)
    f = GGUFFile(smollm2.path)
    assert gen.weight_bytes == f.nbytes() < f.path.stat().st_size  # packed, as in the file
    logits, tokens = gen(ids), []
    n = N_TOKENS if runtime == "reference" else 8  # the CPU runtime's default build is slow
    for step in range(n):
        rel = np.abs(logits - want_logits[step]).max() / np.abs(want_logits[step]).max()
        assert rel < 1e-3, f"step {step}: logits differ by {rel:.2e} (relative)"
        tokens.append(int(np.argmax(logits)))
        assert tokens == want_tokens[:step + 1]
        if step + 1 < n:
            logits = gen([tokens[-1]])
    assert smollm2.tokenizer.decode(tokens).startswith(" girl named Emma who")


def test_smollm2_graph_keeps_weights_packed(smollm2):
    """The graph's weight inputs are the packed parts (u8/i8 quants, f16 scales): what binds
    is the file's bytes, not a float32 copy (5.6x more)."""
    model = smollm2.model
    g = lumos.Graph()
    model(g.tensor((1, "s"), lumos.i64, name="tokens"), 0).output()
    sizes = {}
    for name, i in g.inputs.items():
        n = g.nodes[i]
        if not name.startswith(("cache.", "rotary_emb.", "tokens")):
            sizes[name] = int(np.prod([e.value for e in n.shape])) * n.dtype.itemsize
    assert {g.nodes[i].dtype.name for n, i in g.inputs.items() if n.endswith(".qs")} == \
        {"u8", "i8"}
    total = sum(sizes.values())
    assert total == GGUFFile(smollm2.path).nbytes()
    params = sum(int(np.prod(p.shape)) for name, p in model.named_parameters()
                 if not name.startswith(("cache.", "rotary_emb.")))
    assert total < 0.2 * params * 4

"""The config-driven decoder (`lumos.models.llama`) for each architecture it takes: a tiny
random model of transformers' class, written as a GGUF file the way llama.cpp's converter
writes it (the `gguf` package's tensor names, q/k rows permuted for llama, Llama 3's rope
as `rope_freqs`, matrices quantized), loaded by lumos and compared with transformers on
the dequantized weights; and the same model from its Hugging Face config and dense
weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from lumos.generate import Generator
from lumos.io import GGUFFile, WeightError
from lumos.models import llama

SIZES = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rope_theta=500.0, rms_norm_eps=1e-5, attn_implementation="eager")
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
CASES = {  # name: (transformers classes, extra config, GGUF architecture)
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(rope_scaling=LLAMA3_ROPE), "llama"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True), "qwen2"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24), "qwen3"),
    # sliding windows of 4 keys (IDS is 11 long), soft-caps low enough to bite
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=16, query_pre_attn_scalar=16, sliding_window=4, attn_logit_softcapping=4.0,
        final_logit_softcapping=3.0, rms_norm_eps=1e-6), "gemma2"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_hidden_layers=6, head_dim=24, query_pre_attn_scalar=24, sliding_window=4,
        rope_theta=1e6, rms_norm_eps=1e-6), "gemma3"),  # layers 0-4 slide, 5 is global
    # fused qkv_proj and gate_up_proj (attn_qkv and ffn_up in the file), split on load
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=0), "phi3"),
}
IDS = [5, 17, 63, 0, 42, 42, 9, 31, 2, 60, 7]


def hf_model(case: str, seed: int = 0) -> torch.nn.Module:
    config_cls, model_cls, extra, _ = CASES[case]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**{**SIZES, **extra})
    m = getattr(transformers, model_cls)(config).eval()
    for p in m.parameters():  # larger than the default init: a test that can fail
        torch.nn.init.normal_(p, std=0.3)
    return m


def hf_logits(m: torch.nn.Module, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def dense_state(m: torch.nn.Module) -> dict[str, np.ndarray]:
    tie = m.config.tie_word_embeddings
    return {k.removeprefix("model."): v.numpy() for k, v in m.state_dict().items()
            if not (tie and k == "lm_head.weight")}


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's interleaving of q/k rows for its rope (convert_hf_to_gguf.py)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def write_gguf(m: torch.nn.Module, case: str, path, kinds: list | None = None
               ) -> dict[str, np.ndarray]:
    """`m` as llama.cpp would write it, its matrices quantized to `kinds` in turn; returns
    the weights as the file holds them after dequantization (by transformers' names), the
    reference's weights."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    arch, c = CASES[case][3], m.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], c.num_hidden_layers)
    w = gguf.GGUFWriter(path, arch)
    for key, v in (("vocab_size", c.vocab_size), ("block_count", c.num_hidden_layers),
                   ("context_length", c.max_position_embeddings),
                   ("embedding_length", c.hidden_size),
                   ("feed_forward_length", c.intermediate_size),
                   ("attention.head_count", c.num_attention_heads),
                   ("attention.head_count_kv", c.num_key_value_heads),
                   ("attention.key_length", getattr(c, "head_dim", None) or
                    c.hidden_size // c.num_attention_heads)):
        w.add_uint32(f"{arch}.{key}", v)
    w.add_float32(f"{arch}.rope.freq_base", c.rope_theta)
    if getattr(c, "pad_token_id", None) is not None:  # (Phi-3's, within the tiny vocab)
        w.add_pad_token_id(c.pad_token_id)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    gemma = arch.startswith("gemma")
    if gemma:
        w.add_uint32(f"{arch}.attention.sliding_window", c.sliding_window)
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if getattr(c, key, None) is not None:
                w.add_float32(f"{arch}.{key}", getattr(c, key))
    rotary = m.model.rotary_emb
    if getattr(c, "rope_scaling", None):  # what transformers computes, as llama.cpp stores it
        head = rotary.inv_freq.shape[0] * 2
        base = 1.0 / c.rope_theta ** (np.arange(0, head, 2, dtype=np.float64) / head)
        w.add_tensor("rope_freqs.weight", (base / rotary.inv_freq.double().numpy())
                     .astype(np.float32))
    kinds = kinds or [Q.Q8_0, Q.Q4_0, Q.F16, Q.Q4_1]
    ref = {}
    for i, (name, t) in enumerate(m.state_dict().items()):
        if c.tie_word_embeddings and name == "lm_head.weight":
            continue
        a = t.numpy().astype(np.float32)
        gname = names.get_name(name, try_suffixes=(".weight", ".bias"))
        heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}.get(
            name.split(".")[-2])
        stored = permute(a, heads) if heads and arch == "llama" else a
        key = name.removeprefix("model.")
        if a.ndim == 1 or kinds[i % len(kinds)] == Q.F32:
            # llama.cpp stores Gemma's norm weights w as the 1 + w they multiply by
            w.add_tensor(gname, stored + np.float32(1) if gemma and "norm" in name else stored)
            ref[key] = a
        else:
            kind = kinds[i % len(kinds)]
            packed = gguf.quants.quantize(stored, kind)
            w.add_tensor(gname, packed, raw_dtype=kind)
            ref[key] = gguf.quants.dequantize(gguf.quants.quantize(a, kind), kind) \
                .reshape(a.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ref


def stepwise(gen: Generator, ids: list[int]) -> np.ndarray:
    """The logits after each of ids[2:]: a prompt of 3 (chunked by max_prefill 2) and then
    one token at a time."""
    return np.stack([gen(ids[:3])] + [gen([t]) for t in ids[3:]])


@pytest.mark.parametrize("case", list(CASES))
def test_gguf_file_against_transformers(case, tmp_path):
    m = hf_model(case, seed=1)
    ref = write_gguf(m, case, tmp_path / "tiny.gguf")
    f = GGUFFile(tmp_path / "tiny.gguf")
    config = llama.LlamaConfig.from_gguf(f)
    assert config.architecture == CASES[case][3]
    state, formats = llama.gguf_state(f, config)
    assert {"Q8_0", "Q4_0", "Q4_1", "f16", "f32"} <= set(formats.values())
    gen = Generator(llama.Llama(config, formats, max_context=16), state, max_prefill=2)
    m.load_state_dict({("model." + k if k != "lm_head.weight" else k): torch.from_numpy(v)
                       for k, v in ref.items()}, strict=not m.config.tie_word_embeddings)
    np.testing.assert_allclose(stepwise(gen, IDS), hf_logits(m, IDS)[2:], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("case", list(CASES))
def test_hf_config_and_dense_weights_against_transformers(case):
    m = hf_model(case)
    config = llama.LlamaConfig.from_hf(m.config.to_dict())
    state = dense_state(m)
    if case.startswith("gemma"):  # what llama.load does for an HF folder: norms as 1 + w
        state, _ = llama.gemma_norms(state, {})
    state, _ = llama.split_fused(state, {}, config)  # (and Phi-3's fused matrices split)
    gen = Generator(llama.Llama(config, max_context=16), state, max_prefill=4)
    np.testing.assert_allclose(stepwise(gen, IDS), hf_logits(m, IDS)[2:], rtol=1e-4,
                               atol=1e-4)


def test_unsupported_architectures_and_rope_are_one_line(tmp_path):
    import gguf

    w = gguf.GGUFWriter(tmp_path / "phi.gguf", "phi2")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(WeightError, match=r"phi.gguf: architecture 'phi2' is not "
                                          r"supported \(supported: llama, mistral, qwen2, "
                                          r"qwen3, gemma2, gemma3, phi3"):
        llama.LlamaConfig.from_gguf(GGUFFile(tmp_path / "phi.gguf"))
    with pytest.raises(WeightError, match=r"partial rotary embedding \(factor 0.75\)"):
        llama.LlamaConfig.from_hf({**hf_model("phi3").config.to_dict(),
                                   "partial_rotary_factor": 0.75})
    cfg = hf_model("qwen2").config.to_dict()
    with pytest.raises(WeightError, match="rope scaling .*yarn.* is not supported"):
        llama.LlamaConfig.from_hf({**cfg, "rope_scaling": {"rope_type": "yarn",
                                                            "factor": 4.0}})
    with pytest.raises(WeightError, match="Qwen2's sliding window layers are not supported"):
        llama.LlamaConfig.from_hf({**cfg, "use_sliding_window": True, "sliding_window": 8})


@pytest.mark.parametrize("case", ["qwen2", "phi3"])
def test_file_as_transformers_loads_it(case, tmp_path):
    """The file itself, read by transformers' own GGUF loader (it reads every field a
    Qwen2 or Phi-3 file has, Phi-3's fused matrices too; it ignores Llama 3's rope_freqs
    and Qwen3's key_length)."""
    m = hf_model(case, seed=2)
    write_gguf(m, case, tmp_path / "tiny.gguf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="tiny.gguf").eval()
    f = GGUFFile(tmp_path / "tiny.gguf")
    config = llama.LlamaConfig.from_gguf(f)
    state, formats = llama.gguf_state(f, config)
    gen = Generator(llama.Llama(config, formats, max_context=16), state, max_prefill=16)
    np.testing.assert_allclose(gen(IDS), hf_logits(theirs, IDS)[-1], rtol=1e-4, atol=1e-4)


def test_mistral_sliding_window_from_its_config():
    """Mistral 7B v0.1's window on every layer (4 keys here, 11 tokens)."""
    torch.manual_seed(0)
    m = transformers.MistralForCausalLM(transformers.MistralConfig(
        **{**SIZES, "sliding_window": 4})).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.3)
    config = llama.LlamaConfig.from_hf(m.config.to_dict())
    assert config.sliding_layers == (0, 1) and config.sliding_window == 4
    gen = Generator(llama.Llama(config, max_context=16), dense_state(m), max_prefill=4)
    np.testing.assert_allclose(stepwise(gen, IDS), hf_logits(m, IDS)[2:], rtol=1e-4,
                               atol=1e-4)

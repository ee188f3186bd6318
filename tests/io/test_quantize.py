"""Our encoders (`lumos.io.quantize`) against the `gguf` package's dequantizers: every
type round-trips within the error of the package's own encoder of the same bits, and
`lumos quantize` turns an f32 GGUF into a Q4_K_M mix whose model computes what
transformers computes on the file's dequantized weights."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from lumos import cli
from lumos.generate import Generator
from lumos.io import GGUFFile, WeightError
from lumos.io.quantize import choose, quantize
from lumos.models import llama
from lumos.nn.quant import FORMATS
from tests.models.test_decoders import IDS, hf_logits, write_gguf

PEER = {"Q4_K": "Q4_1", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}  # the package's type of as many bits


def rel_rmse(qtype: str, a: np.ndarray) -> float:
    back = gguf.quants.dequantize(quantize(qtype, a).raw(), Q[qtype]).reshape(a.shape)
    return float(np.sqrt(np.mean((back - a) ** 2)) / a.std())


def test_round_trips_through_the_package():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((32, 1024)) * 0.02).astype(np.float32)
    a[3, :256] = 0.0  # an all-zero super-block
    a[5, 256:512] = np.abs(a[5, 256:512])  # one without negatives (min 0)
    errors = {q: rel_rmse(q, a) for q in FORMATS}
    assert errors["Q4_K"] < 1.05 * errors["Q4_1"] and errors["Q5_K"] < 1.05 * errors["Q5_1"]
    assert errors["Q6_K"] < 0.5 * errors["Q5_1"]  # 6.56 bits a value
    assert errors["Q8_0"] < 0.01
    back = gguf.quants.dequantize(quantize("Q4_K", a).raw(), Q.Q4_K).reshape(a.shape)
    np.testing.assert_array_equal(back[3, :256], 0.0)
    with pytest.raises(Exception, match="multiple of 256"):
        quantize("Q6_K", a[:, :96])


def test_the_mix_and_its_fallbacks():
    assert choose("blk.0.attn_q.weight", (512, 256), "Q4_K_M", 8) == "Q4_K"
    assert choose("blk.0.attn_v.weight", (128, 256), "Q4_K_M", 8) == "Q6_K"  # first eighth
    assert choose("blk.2.ffn_down.weight", (256, 512), "Q4_K_M", 8) == "Q4_K"
    assert choose("blk.3.ffn_down.weight", (256, 512), "Q4_K_M", 8) == "Q6_K"  # every third
    assert choose("blk.7.ffn_down.weight", (256, 512), "Q4_K_M", 8) == "Q6_K"  # last eighth
    assert choose("output.weight", (64, 256), "Q4_K_M", 8) == "Q6_K"
    assert choose("blk.1.attn_q.weight", (576, 576), "Q4_K_M", 8) == "Q5_0"  # 576 = 18 * 32
    assert choose("blk.0.attn_v.weight", (64, 576), "Q4_K_M", 8) == "Q8_0"
    assert choose("blk.0.attn_norm.weight", (576,), "Q4_K_M", 8) is None


def test_quantize_a_file_then_run_it(tmp_path, capsys):
    import transformers

    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, attn_implementation="eager")).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    m.config.rope_scaling = None
    src, dst = tmp_path / "f32.gguf", tmp_path / "q4km.gguf"
    write_gguf(m, "llama3", src, kinds=[Q.F32])
    assert cli.main(["quantize", str(src), str(dst), "--type", "Q4_K_M"]) == 0
    assert "wrote" in capsys.readouterr().err
    f = GGUFFile(dst)
    config = llama.LlamaConfig.from_gguf(f)
    state, formats = llama.gguf_state(f, config)
    assert {"Q4_K", "Q6_K"} <= set(formats.values())
    ref = {}
    for name in f:  # the file's weights, dequantized by the package, as transformers names them
        t = f._tensors[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape(f.shape(name))
        heads = {"q_proj": 4, "k_proj": 2}
        hf = llama.hf_name(name)
        if hf.split(".")[-2] in heads:
            a = a[llama.unpermute_rows(heads[hf.split(".")[-2]], a.shape[0])]
        ref[hf if hf == "lm_head.weight" else "model." + hf] = torch.from_numpy(a.copy())
    m.load_state_dict(ref)
    gen = Generator(llama.Llama(config, formats, max_context=16), state, max_prefill=16)
    np.testing.assert_allclose(gen(IDS), hf_logits(m, IDS)[-1], rtol=1e-4, atol=1e-4)
    with pytest.raises(WeightError, match="unknown file type 'Q3_K_S'"):
        from lumos.io.quantize import requantize
        requantize(str(src), str(tmp_path / "x.gguf"), "Q3_K_S")
    assert not (tmp_path / "x.gguf").exists()

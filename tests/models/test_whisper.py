"""Whisper tiny.en: the CTranslate2 reader and name map, log-mel features against
transformers' feature extractor, and the greedy transcript of a committed speech clip
(espeak-ng: "The quick brown fox jumps over the lazy dog. A compiler searches for the
fastest program.") against transformers' WhisperForConditionalGeneration on the same
weights. The encoder needs the CPU runtime (unfused, the reference runtime would hold
tens of GB of intermediate products)."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lumos import cli
from lumos.errors import LumosError
from lumos.io.errors import WeightError
from lumos.models import whisper
from tests.models.weights import require

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CLIP = Path(__file__).parent / "data" / "speech.wav"


def folder() -> Path:
    return require(whisper.PACKAGE) / "model"


def hf_model() -> Any:
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    ct2 = whisper.read_ctranslate2(folder() / "model.bin")
    model = tf.WhisperForConditionalGeneration(tf.WhisperConfig(**whisper.config(ct2))).eval()
    model.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32))
                           for k, v in whisper.hf_names(ct2).items()})  # strict
    return model


def write_wav(path: Path, samples: np.ndarray, rate: int, width: int = 2) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        pcm = (samples * 127 + 128).astype(np.uint8) if width == 1 else \
            (samples * 32767).astype("<i2")
        w.writeframes(pcm.tobytes())


def test_reader_and_name_map() -> None:
    ct2 = whisper.read_ctranslate2(folder() / "model.bin")
    assert ct2["decoder/embeddings/weight"].dtype == np.float16
    assert ct2["decoder/projection/weight"] is ct2["decoder/embeddings/weight"]  # an alias
    cfg = whisper.config(ct2)
    assert (cfg["d_model"], cfg["encoder_layers"], cfg["decoder_attention_heads"],
            cfg["vocab_size"]) == (384, 4, 6, 51864)
    state = whisper.hf_names(ct2)
    qkv = ct2["encoder/layer_2/self_attention/linear_0/bias"]
    assert not qkv[384:768].any()  # the key bias CTranslate2 stores is zero: dropped
    np.testing.assert_array_equal(state["model.encoder.layers.2.self_attn.v_proj.bias"],
                                  qkv[768:])
    assert "model.encoder.layers.2.self_attn.k_proj.bias" not in state
    hf_model()  # transformers takes every name, strictly


def test_truncated_model_file(tmp_path: Path) -> None:
    src = folder() / "model.bin"
    cut = tmp_path / "model.bin"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(100_000))
    with pytest.raises(WeightError, match="model.bin: truncated: tensor decoder/embeddings"):
        whisper.read_ctranslate2(cut)
    with pytest.raises(WeightError, match="no such weight file"):
        whisper.read_ctranslate2(tmp_path / "missing.bin")


def test_features_match_transformers() -> None:
    tf = pytest.importorskip("transformers")
    audio = whisper.read_wav(CLIP)
    assert audio.dtype == np.float32 and 7 < audio.size / whisper.SAMPLE_RATE < 8
    want = tf.WhisperFeatureExtractor()(audio, sampling_rate=16000,
                                        return_tensors="np").input_features[0]
    np.testing.assert_allclose(whisper.log_mel(audio), want, atol=1e-4)
    from transformers.audio_utils import mel_filter_bank

    bank = mel_filter_bank(num_frequency_bins=201, num_mel_filters=80, min_frequency=0.0,
                           max_frequency=8000.0, sampling_rate=16000, norm="slaney",
                           mel_scale="slaney")
    np.testing.assert_allclose(whisper.mel_filters(80), bank.T, atol=1e-7)


def test_read_wav_mixes_and_resamples(tmp_path: Path) -> None:
    t = np.arange(22050) / 22050
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    for width in (1, 2):
        path = tmp_path / f"stereo{width}.wav"
        write_wav(path, np.stack([tone, tone], 1), 22050, width)
        got = whisper.read_wav(path)
        assert got.size == 16000
        want = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
        assert np.abs(got[500:-500] - want[500:-500]).max() < (0.02 if width == 1 else 1e-3)


def test_unreadable_audio(tmp_path: Path) -> None:
    bad = tmp_path / "talk.wav"
    bad.write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(LumosError, match="talk.wav"):
        whisper.read_wav(bad)


@pytest.fixture(scope="module")
def transcriber() -> whisper.Transcriber:
    require(whisper.PACKAGE)
    from lumos.search import CompileOptions

    return whisper.Transcriber(options=CompileOptions(limit=0))  # the CPU runtime, no search


@pytest.mark.slow
def test_transcript_matches_transformers(transcriber: whisper.Transcriber) -> None:
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    features = whisper.log_mel(whisper.read_wav(CLIP))
    ids = transcriber.generate(features)
    text = transcriber.tokenizer.decode(ids, skip_special_tokens=True)
    assert "quick brown fox" in text and "fastest program" in text

    model = hf_model()
    gen = json.loads((folder() / "config.json").read_text())
    sot, no_ts = transcriber.prompt
    config = tf.GenerationConfig(
        decoder_start_token_id=sot, forced_decoder_ids=[[1, no_ts]],
        no_timestamps_token_id=no_ts, eos_token_id=transcriber.eot,
        pad_token_id=transcriber.eot, bos_token_id=transcriber.eot, max_length=448,
        suppress_tokens=gen["suppress_ids"], begin_suppress_tokens=gen["suppress_ids_begin"],
        is_multilingual=False)
    x = torch.from_numpy(features[None])
    with torch.no_grad():
        want = model.generate(x, generation_config=config)[0].tolist()
        logits = model(x, decoder_input_ids=torch.tensor([[sot, no_ts, *ids[:3]]])).logits
    assert ids == [t for t in want if t not in (sot, no_ts, transcriber.eot)]
    got = transcriber.next_logits([sot, no_ts, *ids[:3]])  # the encoder ran in generate
    np.testing.assert_allclose(got, logits[0, -1].numpy(), rtol=0, atol=2e-3)


@pytest.mark.slow
def test_kv_cache_steps_equal_a_full_recompute(transcriber: whisper.Transcriber,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Token by token, each step runs only the new token (its keys and values appended to
    each layer's cache) and gives the logits of the whole sequence fed at once."""
    transcriber.encode(whisper.log_mel(whisper.read_wav(CLIP)))
    pasts = []
    real = transcriber.decoder.execute
    monkeypatch.setattr(transcriber.decoder, "execute",
                        lambda dims: pasts.append(dims["past"]) or real(dims=dims))
    tokens = [*transcriber.prompt, 440, 2068, 7586, 21831, 11]
    steps = [transcriber.next_logits(tokens[:k]) for k in range(2, len(tokens) + 1)]
    full = transcriber.next_logits(tokens)  # the same tokens again: fed from the start
    assert pasts == [0, 2, 3, 4, 5, 6, 0]
    np.testing.assert_allclose(steps[-1], full, rtol=0, atol=1e-4)
    other = transcriber.next_logits(tokens[:3])  # not an extension: from the start
    np.testing.assert_allclose(other, steps[1], rtol=0, atol=1e-4)
    assert pasts[-1] == 0


@pytest.mark.slow
def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    require(whisper.PACKAGE)
    assert cli.main(["transcribe", "whisper", str(CLIP), "--search", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{CLIP}: The quick brown fox")

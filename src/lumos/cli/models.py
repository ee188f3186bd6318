"""`lumos embed minilm`, `lumos classify mobilenet`, `lumos transcribe whisper` and their
`lumos bench` commands: each parses its own arguments and drives a model class."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from lumos.cli.common import (
    add_compile_options,
    add_runtime,
    compile_options,
    make_runtime,
    median_seconds,
)


def embed(args: Sequence[str]) -> int:
    """`lumos embed minilm SENTENCE...`: each embedding's head and the cosine similarities."""
    from lumos.models.bert import SentenceEncoder

    p = argparse.ArgumentParser(prog="lumos embed minilm",
                                description="Sentence embeddings with all-MiniLM-L6-v2.")
    p.add_argument("sentences", nargs="+")
    add_runtime(p)
    add_compile_options(p)
    opts = p.parse_args(args)
    emb = SentenceEncoder(runtime=make_runtime(opts.runtime),
                          options=compile_options(opts)).encode(opts.sentences)
    for i, (s, e) in enumerate(zip(opts.sentences, emb, strict=True)):
        head = " ".join(f"{v:+.4f}" for v in e[:6])
        print(f"[{i}] {head} ... ({e.shape[0]} dims)  {s}")
    if len(emb) > 1:
        print("cosine similarity")
        print("     " + "".join(f"{f'[{j}]':>9}" for j in range(len(emb))))
        for i, row in enumerate(emb @ emb.T):
            print(f"{f'[{i}]':>5}" + "".join(f"{v:9.4f}" for v in row))
    return 0


def bench_minilm(args: Sequence[str]) -> int:
    """`lumos bench minilm`: latency and sentences/s of a batch of random token ids."""
    from lumos.models.bert import SentenceEncoder

    p = argparse.ArgumentParser(prog="lumos bench minilm")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    add_runtime(p)
    add_compile_options(p)
    opts = p.parse_args(args)
    enc = SentenceEncoder(runtime=make_runtime(opts.runtime), max_batch=opts.batch,
                          options=compile_options(opts))
    ids = np.random.default_rng(0).integers(1000, 30000, (opts.batch, opts.seq))
    mask = np.ones_like(ids)
    t = median_seconds(lambda: enc.embed(ids, mask), opts.rounds)
    print(f"minilm batch {opts.batch} x {opts.seq} tokens on the {opts.runtime} runtime: "
          f"{t * 1e3:.1f} ms, {opts.batch / t:.1f} sentences/s")
    return 0


def classify(args: Sequence[str]) -> int:
    """`lumos classify mobilenet IMAGE...`: the top-5 ImageNet labels of each image."""
    from lumos.models.mobilenet import Classifier, preprocess

    p = argparse.ArgumentParser(prog="lumos classify mobilenet",
                                description="ImageNet-1k classification with MobileNetV2.")
    p.add_argument("images", nargs="+")
    p.add_argument("--top", type=int, default=5)
    add_runtime(p)
    add_compile_options(p)
    opts = p.parse_args(args)
    batch = np.stack([preprocess(f) for f in opts.images])
    clf = Classifier(runtime=make_runtime(opts.runtime), max_batch=len(batch),
                     options=compile_options(opts))
    for name, top in zip(opts.images, clf.top(batch, opts.top), strict=True):
        print(name)
        for label, prob in top:
            print(f"  {prob:7.4f}  {label}")
    return 0


def bench_mobilenet(args: Sequence[str]) -> int:
    """`lumos bench mobilenet`: latency and images/s of a batch of random images."""
    from lumos.models.mobilenet import Classifier

    p = argparse.ArgumentParser(prog="lumos bench mobilenet")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    add_runtime(p)
    add_compile_options(p)
    opts = p.parse_args(args)
    clf = Classifier(runtime=make_runtime(opts.runtime), max_batch=opts.batch,
                     options=compile_options(opts))
    x = np.random.default_rng(0).standard_normal((opts.batch, 3, 224, 224), np.float32)
    t = median_seconds(lambda: clf.probabilities(x), opts.rounds)
    print(f"mobilenet batch {opts.batch} x 224x224 on the {opts.runtime} runtime: "
          f"{t * 1e3:.1f} ms, {opts.batch / t:.1f} images/s")
    return 0


def transcribe(args: Sequence[str]) -> int:
    """`lumos transcribe whisper AUDIO.wav...`: the transcript of each file."""
    from lumos.models.whisper import Transcriber, read_wav

    p = argparse.ArgumentParser(prog="lumos transcribe whisper",
                                description="Speech to text with Whisper tiny.en.")
    p.add_argument("audio", nargs="+", help="WAV files (PCM; resampled to 16 kHz)")
    add_runtime(p, help="the reference runtime needs tens of GB for the encoder")
    add_compile_options(p)
    opts = p.parse_args(args)
    clips = [read_wav(f) for f in opts.audio]
    model = Transcriber(runtime=make_runtime(opts.runtime), options=compile_options(opts))
    for name, audio in zip(opts.audio, clips, strict=True):
        print(f"{name}: {model.transcribe(audio)}")
    return 0


def bench_whisper(args: Sequence[str]) -> int:
    """`lumos bench whisper`: encoder latency (one 30 s window) and decode tokens/s."""
    from lumos.models.whisper import N_SAMPLES, Transcriber, log_mel

    p = argparse.ArgumentParser(prog="lumos bench whisper")
    p.add_argument("--tokens", type=int, default=32, help="decoded tokens (default 32)")
    add_runtime(p)
    add_compile_options(p)
    opts = p.parse_args(args)
    model = Transcriber(runtime=make_runtime(opts.runtime), options=compile_options(opts))
    features = log_mel(np.zeros(N_SAMPLES, np.float32))
    model.encode(features)  # warm-up: first touch of the buffers
    t0 = time.perf_counter()
    model.encode(features)
    enc = time.perf_counter() - t0
    tokens = list(model.prompt)
    t0 = time.perf_counter()
    for _ in range(opts.tokens):
        tokens.append(int(np.argmax(model.next_logits(tokens))))
    tps = opts.tokens / (time.perf_counter() - t0)
    print(f"whisper on the {opts.runtime} runtime: encoder {enc * 1e3:.0f} ms per 30 s window, "
          f"decode {tps:.1f} tokens/s ({opts.tokens} tokens, KV cache)")
    return 0

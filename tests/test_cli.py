"""The `lumos` command: a real SmolLM2 run on the reference runtime, and one-line errors
for bad input (unknown model, missing or truncated file, unsupported quantization, a prompt
longer than the largest bucket, a missing model module, --flush-denormals without a
search)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from lumos import cli
from lumos.io import WeightError
from lumos.models import llama

SMALL = ["--runtime", "reference", "--context", "64", "--max-prefill", "16"]


@pytest.fixture(scope="module")
def smollm2():
    try:
        return llama.smollm2_path()
    except WeightError as e:
        pytest.skip(str(e))


def error_of(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("lumos: error: ")
    return err[-1]


def test_run_smollm2_greedy(smollm2, capsys):
    assert cli.main(["run", "smollm2", "Once upon a time, there was a little",
                     "--max-tokens", "4", *SMALL]) == 0
    out = capsys.readouterr()
    assert out.out == "Once upon a time, there was a little girl named Emma who\n"
    assert "compiling" in out.err and "4 tokens in" in out.err


@pytest.mark.slow
def test_run_smollm2_chat(smollm2, capsys):
    argv = ["run", "smollm2", "What is the capital of France?", "--chat", "--max-tokens", "8",
            "--runtime", "reference", "--context", "64", "--max-prefill", "48"]
    assert cli.main(argv) == 0
    assert "Paris" in capsys.readouterr().out


def test_bench_smollm2(smollm2, capsys):
    """`lumos bench`: the bytes a decode step reads are the file's packed weights plus the
    f32 KV cache at its average length (2 prompt + 2 / 2 decode positions)."""
    from lumos.io import GGUFFile

    assert cli.main(["bench", "smollm2", *SMALL, "--prefill-tokens", "4", "--prompt-tokens",
                     "2", "--decode-tokens", "2", "--rounds", "1"]) == 0
    lines = dict(line.split(maxsplit=1) for line in
                 capsys.readouterr().out.replace("bytes per token", "bytes").splitlines())
    assert lines["model"] == "smollm2 on the reference runtime"
    assert lines["prefill"].endswith(" ms for 4 tokens")
    assert float(lines["decode"].split()[0]) > 0
    kv = 30 * 2 * 3 * 64 * 4 * 3  # layers, K and V, KV heads, head dim, f32, positions
    weights = GGUFFile(smollm2).nbytes()
    assert lines["bytes"] == (f"{(weights + kv) / 1e6:.1f} MB (weights {weights / 1e6:.1f} MB "
                              f"packed, KV cache {kv / 1e6:.1f} MB)")
    assert "measured copy bandwidth" in lines["bandwidth"]


def test_bad_input(smollm2, capsys, tmp_path, monkeypatch):
    assert "unknown model 'gpt5' (known: " in error_of(capsys, ["run", "gpt5", "hi", *SMALL])
    assert "missing.gguf: no such weight file" in error_of(
        capsys, ["run", str(tmp_path / "missing.gguf"), "hi", *SMALL])
    short = tmp_path / "short.gguf"
    short.write_bytes(smollm2.read_bytes()[:5_000_000])
    assert "short.gguf: truncated" in error_of(capsys, ["run", str(short), "hi", *SMALL])
    q2 = tmp_path / "q2.gguf"
    w = gguf.GGUFWriter(q2, "llama")
    assert "q2.gguf: missing metadata llama.attention.head_count" in write_q2(w, capsys, q2)
    w = gguf.GGUFWriter(q2, "llama")
    for key in ("block_count", "context_length", "embedding_length", "feed_forward_length",
                "attention.head_count"):
        w.add_uint32(f"llama.{key}", 64)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    assert "tensor token_embd.weight has unsupported type Q2_K" in write_q2(w, capsys, q2)
    assert "the prompt has 40 tokens; the context holds 32 (raise --context)" in error_of(
        capsys, ["run", "smollm2", " x" * 40, *SMALL, "--context", "32"])
    assert "--flush-denormals applies to a searched program" in error_of(
        capsys, ["run", "smollm2", "hi", "--runtime", "cpu", "--search", "0",
                 "--flush-denormals"])
    assert "--matmul-precision applies to a searched program" in error_of(
        capsys, ["run", "smollm2", "hi", "--runtime", "cpu", "--search", "0",
                 "--matmul-precision", "high"])
    assert "unknown model 'bert' for embed (known: minilm)" in error_of(
        capsys, ["embed", "bert", "a"])
    monkeypatch.setitem(cli.DISPATCH, "embed", {"gone": ("no_such_model", "embed")})
    assert "lumos.models.no_such_model is not available" in error_of(
        capsys, ["embed", "gone", "a"])


def write_q2(w: gguf.GGUFWriter, capsys, path) -> str:
    kind = gguf.GGMLQuantizationType.Q2_K  # 84-byte blocks of 256 values
    w.add_tensor("token_embd.weight", np.zeros((4, 84), np.uint8), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return error_of(capsys, ["run", str(path), "hi", *SMALL])


def tiny_llm(path):
    """A Hugging Face folder of a tiny random Llama whose tokenizer knows 'a' and 'b'."""
    import torch
    from tokenizers import Tokenizer, models

    from tests.models.test_llama import hf_model

    hf_model(tie=True).save_pretrained(path, safe_serialization=True)
    vocab = models.WordLevel({"a": 0, "b": 1}, unk_token="a")
    Tokenizer(vocab).save(str(path / "tokenizer.json"))
    assert torch.get_default_dtype() == torch.float32
    return path


def test_compile_then_run_the_shipped_file(tmp_path, capsys, monkeypatch):
    """`lumos compile` searches once and writes the file; `lumos run FILE` in an empty
    cache loads it (nothing saturated or compiled) and generates what a fresh compile of
    the same model does."""
    from lumos.runtime.cpu import program

    folder = tiny_llm(tmp_path / "tiny")
    lar = tmp_path / "tiny.lar"
    small = ["--context", "16", "--max-prefill", "4", "--search", "2", "--runtime", "cpu"]
    run = ["--max-tokens", "5", "--runtime", "reference", "--context", "16", "--max-prefill",
           "4"]
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path / "cache1"))
    assert cli.main(["compile", str(folder), "-o", str(lar), *small]) == 0
    assert cli.main(["run", str(folder), "a b a", *run]) == 0  # the reference's tokens
    want = capsys.readouterr().out
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path / "cache2"))
    monkeypatch.setattr(program, "build_spaces", None)  # loading saturates nothing
    assert cli.main(["run", str(lar), "a b a", "--max-tokens", "5"]) == 0
    out = capsys.readouterr()
    assert out.out == want and "loading the compiled program" in out.err
    assert not (tmp_path / "cache2" / "cpu").exists()
    bad = tmp_path / "bad.lar"
    bad.write_bytes(lar.read_bytes()[:-7])
    assert "truncated or padded" in error_of(capsys, ["run", str(bad), "a"])


def test_compile_for_serve_then_load_the_batch(tmp_path, capsys, monkeypatch):
    """`lumos compile --slots 2` writes the server's program (the batched graph): `lumos
    serve FILE` loads it (nothing saturated), its logits the reference's; `lumos run`
    refuses it by name."""
    from lumos.batch import Batch
    from lumos.cli.common import make_runtime
    from lumos.cli.llm import batcher, load_llm, shipped
    from lumos.runtime.cpu import program

    folder = tiny_llm(tmp_path / "tiny")
    lar = tmp_path / "serve.lar"
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path / "cache1"))
    assert cli.main(["compile", str(folder), "-o", str(lar), "--slots", "2", "--context", "16",
                     "--max-prefill", "4", "--search", "2", "--runtime", "cpu"]) == 0
    assert "not an artifact for `lumos run`" in error_of(capsys, ["run", str(lar), "a"])
    monkeypatch.setenv("LUMOS_CACHE", str(tmp_path / "cache2"))
    monkeypatch.setattr(program, "build_spaces", None)  # loading saturates nothing
    args = cli._parser().parse_args(["serve", str(lar)])
    artifacts = shipped(args, "serve")
    assert args.slots == 2 and args.context == 16 and artifacts == str(lar)
    pre = load_llm(args.model, args.context, args.slots)
    got = batcher(args, pre, artifacts)
    ref = Batch(pre.model, pre.state, make_runtime("reference"), max_prefill=4)
    for b in (got, ref):
        x, y = b.open(), b.open()
        b.feed(x, [0, 1, 1])
        b.feed(y, [1])
    step = [b.step({0: 1, 1: 0}) for b in (got, ref)]
    for q in (0, 1):
        np.testing.assert_allclose(step[0][q], step[1][q], rtol=1e-4, atol=1e-4)

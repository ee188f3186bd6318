"""Tokenizers from GGUF metadata against independent references, over a corpus of code,
newlines, runs of spaces and tabs, accents, CJK and emoji:

- SentencePiece files (Llama 2, Mistral, Gemma) against the `sentencepiece` library on a
  model built from the same metadata, the text split first at the control and
  user-defined tokens as llama.cpp splits it (each stretch between them tokenized alone,
  with the space prefix where the file asks for one). transformers is no reference here:
  its GGUF converter builds Gemma's tokenizer as a Unigram model of the BPE scores (the
  real Gemma 3 file's "The capital of France is" comes out letter by letter) and leaves
  user-defined tokens to the merges.
- byte-level BPE files (SmolLM2, Qwen) against transformers' tokenizer of the same file;
  user-defined tokens matched whole between the pieces it gives.
- all of them, and Llama 3's pre-tokenizer, against llama.cpp's own tokenizer where
  llama-cpp-python is installed (the benchmarks install it; `make test` does not).

Control tokens are special (skipped by decode(skip_special_tokens=True)); user-defined
ones (Gemma 3's newlines and runs of 2-31 spaces) are text, never skipped."""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np
import pytest

from lumos.io import GGUFFile, WeightError
from lumos.models import llama

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n\treturn fibonacci(n - 1)",
    "The capital of France is",
    "  leading, trailing   ", "word   with\t\ttabs\tand\r\nCRLF", "a\n\n\nb\n",
    "x = [1,2,3]  # comment\n", "Café naïve résumé — «quotes» ½ ① ﬁ \u00a0",
    "東京は日本の首都です。한국어 文字", "😀🎉 👩\u200d👩\u200d👧 flags 🇫🇷", " ", "\n", "",
    "class A:\n\n    def f(self):\n        pass\n\n\n",
]


def sentencepiece_of(md: dict, whole: bool = True) -> object:
    """The `sentencepiece` library's BPE model of a GGUF file's metadata; `whole`: its
    user-defined pieces matched in the text as the library matches them (their spaces as
    "▁"), else never (the text split at them first, as llama.cpp does)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = len(md["tokenizer.ggml.tokens"])
    m.trainer_spec.unk_id = md.get("tokenizer.ggml.unknown_token_id", 0)
    m.trainer_spec.bos_id = md.get("tokenizer.ggml.bos_token_id", -1)
    m.trainer_spec.eos_id = md.get("tokenizer.ggml.eos_token_id", -1)
    m.trainer_spec.pad_id = md.get("tokenizer.ggml.padding_token_id", -1)
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", True))
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for text, score, kind in zip(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.scores"],
                                 md["tokenizer.ggml.token_type"], strict=True):
        p = m.pieces.add()
        p.piece, p.score, p.type = text.replace(" ", "▁") if whole else text, score, kind
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def split_at_tokens(text: str, md: dict) -> list[str | int]:
    """llama.cpp's partition: control and user-defined tokens (longest first) are ids, the
    text between them stays text."""
    tokens, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    whole = {tokens[i]: i for i, k in enumerate(types) if k in (3, 4) and tokens[i]}
    if not whole:
        return [text] if text else []
    pattern = "|".join(re.escape(t) for t in sorted(whole, key=len, reverse=True))
    out: list[str | int] = []
    at = 0
    for m in re.finditer(pattern, text):
        out += [text[at:m.start()]] if m.start() > at else []
        out.append(whole[m.group()])
        at = m.end()
    return out + ([text[at:]] if at < len(text) else [])


def spm_reference(sp, md: dict, text: str) -> list[int]:
    return [i for part in split_at_tokens(text, md)
            for i in ([part] if isinstance(part, int) else sp.encode(part))]


def check_against(tok, reference, texts: list[str], decode=None) -> None:
    """Token ids equal `reference(text)`; decoded, the text itself or `decode(ids)` (not
    checked where the first id is a user-defined token)."""
    for text in texts:
        want = reference(text)
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == want, text
        if decode is None:
            assert tok.decode(got, skip_special_tokens=True) == text, text
        elif got and tok.id_to_token(got[0]) not in USER_TEXT:
            assert tok.decode(got, skip_special_tokens=True) == decode(got), text


def weight_file(path_of) -> GGUFFile:
    """The GGUF file of a weight package, or a skip that says how to install it."""
    try:
        return GGUFFile(path_of())
    except WeightError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def gemma3() -> GGUFFile:
    return weight_file(llama.gemma3_path)


def test_gemma3_file_against_sentencepiece(gemma3):
    md = gemma3.metadata
    assert md["tokenizer.ggml.add_space_prefix"] is False
    sp, tok = sentencepiece_of(md), gemma3.tokenizer()
    check_against(tok, lambda t: spm_reference(sp, md, t), CORPUS)
    # no partition: for this file the library alone on the whole text agrees
    for text in CORPUS:
        assert tok.encode(text, add_special_tokens=False).ids == sp.encode(text), text
    ids = tok.encode("The capital of France is").ids
    assert ids == [2, 818, 5279, 529, 7001, 563]  # <bos> The ▁capital ▁of ▁France ▁is
    # newlines and runs of spaces are user-defined tokens: text, kept by decode
    code = tok.encode("def f():\n    return 1").ids
    assert {107, 140} <= set(code)  # "\n", "    "
    assert tok.decode(code, skip_special_tokens=True) == "def f():\n    return 1"
    # control tokens: parsed from the text, skipped by decode
    turn = tok.encode("<start_of_turn>user\nhi<end_of_turn>", add_special_tokens=False).ids
    assert turn == [105, *sp.encode("user\nhi"), 106]
    assert tok.decode(turn, skip_special_tokens=True) == "user\nhi"


USER_TEXT = ["\n", "\n\n", "  ", "   ", "    ", "\t", "<tool>"]


def sentencepiece_file(path, prefix: bool) -> dict:
    """A GGUF with a small SentencePiece vocabulary as Llama 2's and Gemma's files hold it:
    scores and no merges, byte tokens, control tokens and user-defined newlines, runs of
    spaces and a tag."""
    w = gguf.GGUFWriter(path, "llama")
    letters = sorted(set("abcdefhilmnoprstuwxy(){}:=<>#,.'\"_"))
    normal = ["▁", *letters, "▁a", "ab", "▁ab", "bc", "abc", "▁abc", "th", "the", "▁t", "▁th",
              "▁the", "he", "in", "▁in", "de", "def", "▁def", "re", "ret", "urn", "return",
              "▁return"]
    control = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"]
    user = USER_TEXT
    tokens = [*control, *(f"<0x{i:02X}>" for i in range(256)), *normal, *user]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * (len(control) + 256) + [-(i + 1.0) for i in range(len(normal))]
                       + [0.0] * len(user))
    w.add_token_types([2] + [3] * (len(control) - 1) + [6] * 256 + [1] * len(normal)
                      + [4] * len(user))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(prefix)
    finish(w)
    return GGUFFile(path).metadata


def bpe_file(path: Path, arch: str, pre: str, md: dict, user: list[str] | None = None
             ) -> Path:
    """A byte-level BPE file of architecture `arch` and pre-tokenizer `pre` with the
    vocabulary and merges of metadata `md` (SmolLM2's), `user` appended as user-defined
    tokens; no BOS added."""
    user = user or []
    w = gguf.GGUFWriter(path, arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([*md["tokenizer.ggml.tokens"], *user])
    w.add_token_types([*md["tokenizer.ggml.token_type"], *[4] * len(user)])
    w.add_token_merges(md["tokenizer.ggml.merges"])
    w.add_bos_token_id(md["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(md["tokenizer.ggml.eos_token_id"])
    w.add_add_bos_token(False)
    finish(w)
    return path


def finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("prefix", [True, False])
def test_sentencepiece_metadata_with_user_defined_tokens(tmp_path, prefix):
    md = sentencepiece_file(tmp_path / "spm.gguf", prefix)
    sp, tok = sentencepiece_of(md, whole=False), GGUFFile(tmp_path / "spm.gguf").tokenizer()
    library = sentencepiece_of(md)
    texts = [*CORPUS, "a<tool>b", "<tool>a", "the   abc\n", "  def", "<start_of_turn>the"]
    # with a space prefix, each stretch after a user-defined token gets one (llama.cpp):
    # decoded, it is there, as the library decodes those ids (where the text starts with
    # such a token, llama.cpp drops the first space of it, as lumos does, and the library
    # does not)
    plain = [t for t in texts if "<start_of_turn>" not in t]
    check_against(tok, lambda t: spm_reference(sp, md, t), plain,
                  decode=sp.decode if prefix else None)
    ids = tok.encode("<start_of_turn>the").ids
    assert ids == [1, 3, *sp.encode("the")]  # BOS, the control token, the text after it
    assert tok.decode(ids, skip_special_tokens=True) == "the"
    if not prefix:  # nothing between the pieces: the library on the whole text agrees
        for t in texts:
            if "<" not in t:
                assert tok.encode(t, add_special_tokens=False).ids == library.encode(t), t


@pytest.fixture(scope="module")
def smollm2() -> GGUFFile:
    return weight_file(llama.smollm2_path)


def test_byte_level_bpe_file_against_transformers(smollm2):
    import transformers

    path = smollm2.path
    theirs = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok = smollm2.tokenizer()
    assert not smollm2.metadata["tokenizer.ggml.add_bos_token"]  # (transformers adds one)
    # transformers' converter ignores `tokenizer.ggml.pre`: SmolLM2's pre-tokenizer
    # ("smollm": every numeral alone, as its own tokenizer.json's Digits) it replaces by
    # GPT-2's, which keeps runs of numerals together; those texts are checked apart
    numerals = re.compile(r"[0-9]{2,}|[½①]")
    for text in CORPUS + ["numbers 12345 and 3.14"]:
        ids = tok.encode(text).ids
        assert tok.decode(ids) == theirs.decode(ids) == text
        if not numerals.search(text):
            assert ids == theirs(text, add_special_tokens=False).input_ids, text
    digits = tok.encode("x 2026 ½").ids
    assert [tok.id_to_token(i) for i in digits] == ["x", "Ġ", "2", "0", "2", "6", "Ġ", "Â½"]


def test_user_defined_tokens_of_a_byte_level_bpe_file(smollm2, tmp_path):
    """SmolLM2's vocabulary written again as a Qwen-style file with user-defined tokens
    (a tag and a run of spaces): matched whole, the text around them as transformers
    tokenizes it alone, and decoded as text."""
    import transformers

    md = smollm2.metadata
    user = ["<tool_call>", "</tool_call>", "        "]
    tok = GGUFFile(bpe_file(tmp_path / "bpe.gguf", "qwen2", md["tokenizer.ggml.pre"], md,
                            user)).tokenizer()
    ref = transformers.AutoTokenizer.from_pretrained(smollm2.path.parent,
                                                     gguf_file=smollm2.path.name)
    n = len(md["tokenizer.ggml.tokens"])
    enc = lambda t: ref.encode(t, add_special_tokens=False)  # noqa: E731
    text = "<tool_call>{\"name\": \"f\"}</tool_call>\nif x:\n        y = 1"
    got = tok.encode(text).ids
    want = [n, *enc("{\"name\": \"f\"}"), n + 1, *enc("\nif x:\n"), n + 2, *enc("y = 1")]
    assert got == want
    assert tok.decode(got, skip_special_tokens=True) == text


def test_real_file_quants_in_the_graph_equal_gguf(gemma3):
    """One matrix of each quant type of the real Gemma 3 file (a Q4_K_M mix), dequantized
    as lumos computes with it, equals the gguf package's dequantization exactly."""
    from tests.io.test_gguf import dequantize_in_graph, raw

    seen: dict[str, str] = {}
    for name in gemma3:
        fmt = gemma3.fmt(name)
        if fmt not in ("f32", "f16", "bf16") and fmt not in seen and name != "token_embd.weight":
            seen[fmt] = name
    assert set(seen) >= {"Q5_0", "Q4_K", "Q6_K", "Q8_0"}
    for name in seen.values():
        want = gguf.quants.dequantize(*raw(gemma3, name)).reshape(gemma3.shape(name))
        np.testing.assert_array_equal(dequantize_in_graph(gemma3[name]), want, err_msg=name)


def test_qwen2_pre_tokenizer_against_transformers(smollm2, tmp_path):
    """A byte-level BPE file with Qwen2's pre-tokenizer (`tokenizer.ggml.pre` qwen2: its
    numerals one by one, contractions, newlines as Qwen2 splits them), which transformers
    builds as Qwen2's own tokenizer: SmolLM2's vocabulary and merges written so."""
    import transformers

    md = smollm2.metadata
    tok = GGUFFile(bpe_file(tmp_path / "qwen2.gguf", "qwen2", "qwen2", md)).tokenizer()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="qwen2.gguf")
    for text in [*CORPUS, "numbers 12345 and 3.14, it's WE'LL\r\n\r\n  x"]:
        ids = tok.encode(text).ids
        assert ids == theirs(text, add_special_tokens=False).input_ids, text
        assert tok.decode(ids) == theirs.decode(ids) == text


def test_against_llama_cpp_where_installed(smollm2, gemma3, tmp_path):
    """llama.cpp's own tokenizer (llama-cpp-python, the benchmarks' peer: not installed by
    `make test`, skipped without it) on the real files and on written ones of each kind:
    Llama 3's pre-tokenizer (transformers' converter gives Llama 3 files GPT-2's), Qwen2's,
    and SentencePiece with and without the space prefix."""
    llama_cpp = pytest.importorskip("llama_cpp")
    md = smollm2.metadata
    files = [smollm2.path, gemma3.path]
    for arch, pre in (("llama", "llama-bpe"), ("qwen2", "qwen2")):
        files.append(bpe_file(tmp_path / f"{pre}.gguf", arch, pre, md))
    for prefix in (True, False):
        sentencepiece_file(tmp_path / f"spm{prefix}.gguf", prefix)
        files.append(tmp_path / f"spm{prefix}.gguf")
    texts = [*CORPUS, "numbers 12345 and 3.14, it's WE'LL\r\n\r\n  x", "a<tool>b", "  def",
             "<start_of_turn>user\nhi<end_of_turn>"]
    for path in files:
        ours = GGUFFile(path).tokenizer()
        theirs = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        for text in texts:
            assert ours.encode(text, add_special_tokens=False).ids == \
                theirs.tokenize(text.encode(), add_bos=False, special=True), (path.name, text)

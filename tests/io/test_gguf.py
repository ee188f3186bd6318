"""GGUF: packed tensors of every supported quantization type dequantized in the graph
equal gguf's numpy dequantization exactly (synthetic files written with the gguf package:
quantized by it where it can, random blocks where it cannot, and real SmolLM2 tensors);
dense tensors, metadata and bad files."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import lumos
from lumos import nn
from lumos.dtype import bf16_to_f32
from lumos.io import GGUFFile, WeightError
from lumos.nn.quant import FORMATS

QUANTS = tuple(FORMATS)
RNG = np.random.default_rng(0)
SHAPES = {"mat": (6, 512), "cube": (2, 3, 256)}


def random_blocks(qtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Raw blocks of `qtype` holding `shape`: random bytes, f16 scales of a real model's
    size (any bytes are valid quants: the types the package cannot quantize are tested
    so)."""
    fmt = FORMATS[qtype]
    rows, n = int(np.prod(shape[:-1])), shape[-1]
    blocks = RNG.integers(0, 256, (rows * n // fmt.block, fmt.block_bytes), np.uint8) \
        .reshape(-1).view(fmt.numpy_block())
    for p, dt, _ in fmt.fields:
        if dt is lumos.f16:
            blocks[p] = (RNG.standard_normal(blocks.shape) * 0.01).astype(np.float16)
    return blocks.view(np.uint8).reshape(*shape[:-1], -1)


def write(path, tensors: dict[str, tuple[np.ndarray, Q]], **kv) -> None:
    w = gguf.GGUFWriter(path, "llama")
    for k, v in kv.items():
        (w.add_string if isinstance(v, str) else w.add_uint32)(k, v)
    for name, (data, kind) in tensors.items():
        if kind in (Q.F32, Q.F16):
            w.add_tensor(name, data.astype(np.float32 if kind == Q.F32 else np.float16))
        elif data.dtype == np.uint8:  # raw blocks
            w.add_tensor(name, data, raw_dtype=kind)
        else:
            w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "s.gguf"
    data = {k: (RNG.standard_normal(s) * 3).astype(np.float32) for k, s in SHAPES.items()}
    data["mat"][0, :32] = 0.0  # an all-zero block (scale 0)
    tensors = {}
    for k, a in data.items():
        for q in QUANTS:
            try:
                gguf.quants.quantize(a[..., :FORMATS[q].block], Q[q])
                tensors[f"{k}.{q}"] = (a, Q[q])
            except NotImplementedError:
                tensors[f"{k}.{q}"] = (random_blocks(q, a.shape), Q[q])
    tensors |= {f"{k}.{t}": (a, Q[t]) for k, a in data.items() for t in ("F32", "F16", "BF16")}
    write(path, tensors, **{"general.name": "tiny", "llama.block_count": 2})
    return GGUFFile(path), data


def dequantize_in_graph(packed: nn.Packed) -> np.ndarray:
    g = lumos.Graph()
    parts = {k: g.tensor(v.shape, lumos.dtype.as_dtype(v.dtype), name=k)
             for k, v in packed.parts.items()}
    out = nn.dequantize(packed.qtype, parts).output()
    prog = g.compile(lumos.ReferenceRuntime())
    for k, t in parts.items():
        prog.set_data(t, packed.parts[k])
    prog.execute()
    return prog.get(out)


def raw(f: GGUFFile, name: str) -> tuple[np.ndarray, Q]:
    t = f._tensors[name]
    return t.data, t.tensor_type


@pytest.mark.parametrize("qtype", QUANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_dequantize_in_graph_is_exact(synthetic, qtype, shape):
    f, _ = synthetic
    name = f"{shape}.{qtype}"
    packed = f[name]
    assert isinstance(packed, nn.Packed) and packed.shape == SHAPES[shape]
    assert f.fmt(name) == qtype and f.dtype(name) is None
    got = dequantize_in_graph(packed)
    want = gguf.quants.dequantize(*raw(f, name)).reshape(SHAPES[shape])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_dense_tensors_and_metadata(synthetic):
    f, data = synthetic
    assert f.metadata["general.name"] == "tiny" and f.architecture == "llama"
    for shape, a in data.items():
        np.testing.assert_array_equal(f[f"{shape}.F32"], a)
        np.testing.assert_array_equal(f[f"{shape}.F16"], a.astype(np.float16))
        bf = f[f"{shape}.BF16"]
        assert bf.dtype == np.uint16 and f.dtype(f"{shape}.BF16") is lumos.bf16
        np.testing.assert_array_equal(bf16_to_f32(bf), gguf.quants.dequantize(
            *raw(f, f"{shape}.BF16")).reshape(a.shape))


@pytest.mark.parametrize("qtype", QUANTS)
def test_packed_linear_and_embedding(synthetic, qtype):
    """Modules with packed weights: the graph reads the packed parts, never a dense copy."""
    f, _ = synthetic
    packed = f[f"mat.{qtype}"]
    w = gguf.quants.dequantize(*raw(f, f"mat.{qtype}")).reshape(6, 512)
    lin, emb = nn.Linear(512, 6, fmt=qtype), nn.Embedding(6, 512, fmt=qtype)
    holder = nn.Module()
    holder.lin, holder.emb = lin, emb
    g = lumos.Graph()
    x, ids = g.tensor((2, 512), name="x"), g.tensor((3,), lumos.i64, name="ids")
    y, e = lin(x).output(), emb(ids).output()
    assert all(g.nodes[i].dtype is not lumos.f32 for n, i in g.inputs.items()
               if n.endswith(".qs"))
    prog = g.compile(lumos.ReferenceRuntime())
    bound = nn.load_state(holder, prog, {"lin.weight": packed, "emb.weight": packed})
    assert bound == 2 * packed.nbytes < w.nbytes
    xv, iv = RNG.standard_normal((2, 512)).astype(np.float32), np.array([5, 0, 5])
    prog.set_data(x, xv)
    prog.set_data(ids, iv)
    prog.execute()
    np.testing.assert_allclose(prog.get(y), xv @ w.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(prog.get(e), w[iv])


def test_bad_files(synthetic, tmp_path):
    f, data = synthetic
    q2 = tmp_path / "q2.gguf"
    write(q2, {"blk.0.attn_q.weight": (np.zeros((6, 2 * 84), np.uint8), Q.Q2_K)})
    with pytest.raises(WeightError, match=r"q2.gguf: tensor blk.0.attn_q.weight has "
                                          r"unsupported type Q2_K \(supported: .*Q6_K\)"):
        GGUFFile(q2)["blk.0.attn_q.weight"]
    short = tmp_path / "short.gguf"
    short.write_bytes(f.path.read_bytes()[:-100])
    with pytest.raises(WeightError, match="short.gguf: truncated"):
        GGUFFile(short)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(f.path.read_bytes()[:40])
    with pytest.raises(WeightError, match="header.gguf: truncated or corrupt"):
        GGUFFile(header_only)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(WeightError, match="other.gguf: not a GGUF file"):
        GGUFFile(other)
    with pytest.raises(WeightError, match="no such weight file"):
        GGUFFile(tmp_path / "missing.gguf")


@pytest.fixture(scope="module")
def smollm2():
    from lumos.models import llama

    try:
        return GGUFFile(llama.smollm2_path())
    except WeightError as e:
        pytest.skip(str(e))


def test_smollm2_tensors(smollm2):
    f = smollm2
    fmts = [f.fmt(n) for n in f]
    assert fmts.count("Q4_1") == 210 and fmts.count("f32") == 61 and fmts.count("Q8_0") == 1
    for name in ("blk.0.attn_k.weight", "blk.17.ffn_down.weight"):
        np.testing.assert_array_equal(dequantize_in_graph(f[name]),
                                      gguf.quants.dequantize(*raw(f, name)).reshape(
                                          f.shape(name)))
    emb = f["token_embd.weight"]  # Q8_0 (49152, 576): the rows an Embedding gathers
    ids = np.array([0, 1, 2, 49151, 1838])
    np.testing.assert_array_equal(dequantize_in_graph(emb.rows(ids)), gguf.quants.dequantize(
        raw(f, "token_embd.weight")[0][ids], Q.Q8_0))
    packed = sum(v.nbytes for v in (f[n] for n in f))
    assert packed == f.nbytes() > 0.98 * f.path.stat().st_size  # the rest is metadata


def sentencepiece_file(path, prefix: bool = True) -> None:
    """A GGUF with a tiny SentencePiece vocabulary (scores, no merges), as Llama 2's."""
    w = gguf.GGUFWriter(path, "llama")
    normal = ["▁", "a", "b", "c", "t", "h", "e", "▁a", "ab", "▁ab", "bc", "abc", "▁abc", "th",
              "the", "▁t", "▁th", "▁the", "he"]
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", *(f"<0x{i:02X}>" for i in range(256)), *normal])
    w.add_token_scores([0.0] * 259 + [-(i + 1.0) for i in range(len(normal))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(normal))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


TEXTS = ["abc the", "ab c", "a\nb", "é the", "thea  bc", " a", "<s>a"]


def test_sentencepiece_tokenizer_against_transformers(tmp_path):
    import transformers

    sentencepiece_file(tmp_path / "spm.gguf")
    ours = GGUFFile(tmp_path / "spm.gguf").tokenizer()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="spm.gguf")
    for text in TEXTS:
        ids = ours.encode(text).ids
        assert ids == theirs(text).input_ids, text
        assert ids[0] == 1  # BOS: the default of a SentencePiece file
        assert ours.decode(ids, skip_special_tokens=True) == \
            theirs.decode(ids, skip_special_tokens=True)
    assert ours.encode("a\nb", add_special_tokens=False).ids == [266, 13, 261]  # <0x0A>


def test_sentencepiece_without_a_space_prefix(tmp_path):
    """Gemma's files: no "▁" before the text."""
    sentencepiece_file(tmp_path / "spm.gguf", prefix=False)
    tok = GGUFFile(tmp_path / "spm.gguf").tokenizer()
    ids = tok.encode("abc the", add_special_tokens=False).ids
    assert ids == [270, 276]  # abc, ▁the
    assert tok.decode(ids) == "abc the"


def same_as_gguf_reader(f: GGUFFile) -> None:
    """lumos' header reader against the gguf package's: every metadata value (type too),
    and every tensor's type, dims, offset, size and bytes."""
    r = gguf.GGUFReader(f.path)
    want = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert list(f.metadata) == list(want)
    for k, v in want.items():
        assert f.metadata[k] == v and type(f.metadata[k]) is type(v), k
    assert list(f) == [t.name for t in r.tensors]
    for t in r.tensors:
        mine = f._tensors[t.name]
        assert (mine.tensor_type, mine.shape, mine.data_offset, mine.n_bytes) == \
            (t.tensor_type, tuple(int(d) for d in t.shape), t.data_offset, t.n_bytes)
        assert mine.data.dtype == t.data.dtype and mine.data.shape == t.data.shape
        np.testing.assert_array_equal(mine.data, t.data)


def test_header_as_the_gguf_package_reads_it(synthetic, smollm2, tmp_path):
    f, _ = synthetic
    same_as_gguf_reader(f)
    same_as_gguf_reader(smollm2)
    w = gguf.GGUFWriter(tmp_path / "kinds.gguf", "llama")  # every metadata value type
    w.add_uint8("a.u8", 7)
    w.add_int16("a.i16", -3)
    w.add_uint64("a.u64", 2**40)
    w.add_float64("a.f64", 0.1)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "naïve ▁ 東京")
    w.add_array("a.strs", ["", "x y", "\n"])
    w.add_array("a.ints", [1, -2, 3])
    w.add_tensor("t", np.arange(6, dtype=np.float16).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    same_as_gguf_reader(GGUFFile(tmp_path / "kinds.gguf"))
    w = gguf.GGUFWriter(tmp_path / "nested.gguf", "llama")  # (the package flattens these)
    w.add_array("a.nested", [[1, 2], [3]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    assert GGUFFile(tmp_path / "nested.gguf").metadata["a.nested"] == [[1, 2], [3]]

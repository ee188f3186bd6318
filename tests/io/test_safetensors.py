"""safetensors: memory-mapped round trip of every dtype, bound into a graph; bad files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import lumos
from lumos.dtype import bf16_to_f32
from lumos.io import SafeTensors, WeightError

TENSORS = {
    "f32": torch.randn(3, 4), "f16": torch.randn(5).half(), "bf16": torch.randn(2, 3).bfloat16(),
    "f64": torch.randn(2).double(), "i8": torch.tensor([-3, 7], dtype=torch.int8),
    "u8": torch.tensor([[0, 255]], dtype=torch.uint8), "i32": torch.tensor([1 << 30]),
    "i64": torch.tensor([-(1 << 40), 5]), "bool": torch.tensor([True, False, True]),
    "empty": torch.zeros(0, 3),
}


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "w.safetensors"
    save_file(TENSORS, p, metadata={"format": "pt"})
    return p


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def test_round_trip_is_mapped_and_binds(path):
    st = SafeTensors(path)
    assert sorted(st) == sorted(TENSORS) and st.metadata == {"format": "pt"}
    g = lumos.Graph()
    inputs, outputs = {}, {}
    for name, t in TENSORS.items():
        arr = st[name]
        assert not arr.flags.owndata and not arr.flags.writeable  # a view of the mapping
        got = bf16_to_f32(arr) if name == "bf16" else arr
        np.testing.assert_array_equal(got, as_numpy(t))
        assert st.shape(name) == tuple(t.shape)
        inputs[name] = g.tensor(st.shape(name), st.dtype(name), name=name)
        outputs[name] = (inputs[name] * 1 if name != "bool" else inputs[name]).output()
    prog = g.compile(lumos.ReferenceRuntime())
    for name, t in inputs.items():
        prog.set_data(t, st[name])
    prog.execute()
    for name, t in TENSORS.items():
        got = prog.get(outputs[name])
        got = bf16_to_f32(got) if name == "bf16" else got
        np.testing.assert_array_equal(got, as_numpy(t))


def test_bad_files(path, tmp_path):
    with pytest.raises(WeightError, match="no such weight file"):
        SafeTensors(tmp_path / "missing.safetensors")
    short = tmp_path / "short.safetensors"
    short.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(WeightError, match="short.safetensors: not a valid safetensors file"):
        SafeTensors(short)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x05" * 64)
    with pytest.raises(WeightError, match="junk.safetensors"):
        SafeTensors(junk)

"""PyTorch's OpInfo samples through torch.compile(backend="lumos", strict) against eager
(tests/torch/opinfo.py: the op list, samples and comparison).

The default run takes a representative slice (about 50 s on 2 cores, cold caches): the
first sample of each dtype of the ops in FAST on the reference runtime (translations),
and of the first dtype of CPU_FAST (every dtype for those in BY_DTYPE) on the "cpu"
runtime (generated C: each such sample compiles a program, a second or more). The slow run
(`pytest -m slow tests/torch/test_opinfo.py`, not part of a plain `pytest`) takes every
sample of the op list on the reference runtime, and the first sample of each dtype of
every op on the cpu runtime. Known failures are strict xfails with reasons
(`KNOWN`), so a fix shows up as an unexpected pass.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.torch import opinfo

# one op or more of each family: elementwise (unary, binary, special values), integer and
# bool logic, reductions, scans and sorts, indexing and scatters, layout, linear algebra,
# nn.functional (activations, convolutions, pools, norms, attention, losses)
FAST = [
    "abs", "acos", "asinh", "atan2", "cosh", "erfc", "exp", "fmax", "log10", "tan", "sigmoid",
    "pow", "div.floor_rounding", "remainder", "where", "clamp", "nan_to_num", "bitwise_and",
    "bitwise_left_shift", "logical_xor", "eq", "sum", "amax", "var_mean", "argmax",
    "logsumexp", "cumsum", "cummax", "cumprod", "topk", "median", "gather",
    "scatter_add", "scatter_reduce.amax", "index_put", "index_select", "take_along_dim",
    "masked_fill", "cat", "flip", "roll", "unfold", "as_strided", "diagonal_scatter",
    "tril", "matmul", "addmm", "einsum", "nn.functional.gelu", "nn.functional.hardtanh",
    "nn.functional.conv2d", "nn.functional.conv_transpose2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool1d", "nn.functional.adaptive_max_pool2d",
    "nn.functional.layer_norm", "nn.functional.instance_norm", "nn.functional.batch_norm",
    "nn.functional.scaled_dot_product_attention", "nn.functional.one_hot",
    "nn.functional.cross_entropy", "nn.functional.embedding", "softmax",
]
BY_DTYPE = {"abs", "bitwise_and", "bitwise_left_shift", "sum", "cummax", "topk",
            "scatter_add", "nn.functional.avg_pool1d", "nn.functional.max_pool2d"}
# (topk left to the slow run: its two samples took 170-187 s each on the CPU runtime, a
# quarter of `make test` on a 2-core Zen 3)
CPU_FAST = ["asin", "atanh", "atan2", "bitwise_xor", "bitwise_right_shift", "cummax",
            "scatter_add", "nn.functional.conv_transpose1d", "nn.functional.avg_pool2d",
            "nn.functional.max_pool2d", "nn.functional.batch_norm",
            "nn.functional.scaled_dot_product_attention", "nn.functional.hardsigmoid"]

# (op, runtime) -> why its samples fail; "*" for every runtime
KNOWN: dict[tuple[str, str], str] = {
    ("nn.functional.linear_cross_entropy.chunked", "*"):
        "the prototype custom op torch_nn._linear_cross_entropy_batch_chunked is not "
        "translated",
    ("nn.functional.linear_cross_entropy.chunked_none", "*"):
        "the prototype custom op torch_nn._linear_cross_entropy_batch_chunked_no_reduction "
        "is not translated",
}

REFERENCE = {"strict": True, "runtime": "reference"}
CPU = {"strict": True, "runtime": "cpu"}


def _params(names: list[str], options: dict[str, Any], per_dtype: int,
            first_dtype: bool = False) -> list[Any]:
    """Samples of the ops as parameters; `first_dtype`: of its first dtype only (all of
    them for the ops in BY_DTYPE)."""
    runtime = options["runtime"]
    out = []
    for name in names:
        ss = list(opinfo.samples(name, per_dtype))
        if first_dtype and name not in BY_DTYPE:
            ss = ss[:1]
        for s in ss:
            why = KNOWN.get((name, runtime)) or KNOWN.get((name, "*"))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(s, options, id=f"{runtime}-{s.id}", marks=marks))
    return out


def _check(sample: opinfo.Sample, options: dict[str, Any]) -> None:
    outcome = opinfo.run(sample, options=options)
    assert outcome.ok, f"{sample.id}: {outcome.reason}"


@pytest.mark.parametrize(("sample", "options"), _params(FAST, REFERENCE, 1)
                         + _params(CPU_FAST, CPU, 1, True))
def test_fast(sample: opinfo.Sample, options: dict[str, Any]) -> None:
    _check(sample, options)


@pytest.fixture
def whole_list(request: pytest.FixtureRequest) -> None:
    """The whole-list runs take many minutes, so they run only when asked for by marker
    (`pytest -m slow tests/torch/test_opinfo.py`), not in a plain `pytest`, which runs
    the other slow tests."""
    expr = request.config.option.markexpr or ""
    if "slow" not in expr or "not slow" in expr:
        pytest.skip("the whole OpInfo list runs with -m slow")


def _ops(runtime: str) -> list[Any]:
    out = []
    for name in opinfo.op_list():
        why = KNOWN.get((name, runtime)) or KNOWN.get((name, "*"))
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(name, id=name, marks=marks))
    return out


def _check_all(name: str, options: dict[str, Any], per_dtype: int) -> None:
    failed = [f"{s.id}: {o.reason}" for s in opinfo.samples(name, per_dtype)
              if not (o := opinfo.run(s, options=options)).ok and not o.reason.startswith(
                  "eager:")]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("name", _ops("reference"))
def test_all_reference(whole_list: None, name: str) -> None:
    """Every sample of the op list (PER_DTYPE per dtype) on the reference runtime."""
    _check_all(name, REFERENCE, opinfo.PER_DTYPE)


@pytest.mark.slow
@pytest.mark.parametrize("name", _ops("cpu"))
def test_all_cpu(whole_list: None, name: str) -> None:
    """The first sample of each dtype of every op on the cpu runtime."""
    _check_all(name, CPU, 1)


def test_op_list_documents_exclusions() -> None:
    """Every op_db entry is either in the list, excluded for a stated reason, or has none
    of the list's dtypes on the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    listed = opinfo.op_list()
    for op in op_db:
        name = opinfo.op_name(op)
        assert name in listed or opinfo.excluded(name) or not opinfo.dtypes(op), name
    assert len(listed) > 400


def test_a_wrong_result_fails() -> None:
    """The comparison can fail: a backend that adds one to every float output."""
    def off_by_one(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        def run(*args: Any) -> Any:
            out = gm(*args)
            return tuple(o + 1 if isinstance(o, torch.Tensor) and o.is_floating_point()
                         else o for o in out) if isinstance(out, tuple) else out
        return run

    s = next(opinfo.samples("exp", 1))
    assert not opinfo.run(s, backend=off_by_one).ok
    assert opinfo.run(s, backend="eager").ok


@pytest.mark.parametrize("name", ["sort", "topk"])
def test_tied_indices_are_checked(name: str) -> None:
    """Ops with unspecified tie order are compared by the values their indices point at:
    a wrong index still fails."""
    s = next(iter(s for s in opinfo.samples(name, 1) if s.sample.input.numel() > 1))

    def shifted(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        def run(*args: Any) -> Any:
            values, indices = gm(*args)
            return values, (indices + 1) % indices.max().clamp(min=1)
        return run

    assert not opinfo.run(s, backend=shifted).ok

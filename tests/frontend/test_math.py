"""Accuracy of the derived transcendental functions (lumos.frontend.elementwise) over
dense sweeps of their domains, near 0, +-1, their poles and at large arguments: within a
few units in the last place of PyTorch's float64 result, in float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lumos
from lumos.frontend import elementwise as E
from tests.helpers import run


def _both_signs(lo: float, hi: float, n: int = 1500) -> np.ndarray:
    a = np.logspace(lo, hi, n)
    return np.concatenate([a, -a, [0.0]])


_NEAR_ONE = 1 - np.logspace(-7.3, -0.3, 400)
_UNIT = np.concatenate([_NEAR_ONE, -_NEAR_ONE, np.linspace(-1, 1, 2001)])
_K = np.arange(-100000, 100000, 37)
DOMAINS = {
    "asin": _UNIT, "acos": _UNIT, "atanh": np.concatenate([_UNIT[:-1], _both_signs(-30, -1)]),
    "atan": _both_signs(-30, 30), "sinh": _both_signs(-9, np.log10(88)),
    "cosh": _both_signs(-9, np.log10(88)), "asinh": _both_signs(-30, 30),
    "acosh": 1 + np.logspace(-7, 30, 2000), "log10": np.logspace(-37, 38, 2000),
    # multiples of pi/2 rounded to float32: the nearest neighbours of tan's poles
    "tan": np.concatenate([_K * np.pi / 2, _K * 0.731, _both_signs(-20, 5.5)]),
}


@pytest.mark.parametrize("dtype", [lumos.f32, lumos.f64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_ulp_error(name: str, dtype: lumos.DType) -> None:
    npdt = dtype.np.type
    x = DOMAINS[name].astype(np.float32).astype(npdt)  # float32 points in both dtypes
    g = lumos.Graph()
    t = g.tensor(x.shape, dtype)
    (got,) = run([getattr(E, name)(t)], {t: x})
    want = getattr(torch, name)(torch.from_numpy(x.astype(np.float64))).numpy()
    fin = np.isfinite(want) & (np.abs(want) < np.finfo(npdt).max)
    np.testing.assert_array_equal(np.isnan(got[~fin]), np.isnan(want[~fin].astype(npdt)))
    ulp = np.spacing(np.abs(want[fin]).astype(npdt)).astype(np.float64)
    err = np.abs(got[fin].astype(np.float64) - want[fin]) / ulp
    assert err.max() <= 4, f"{name}: {err.max():.1f} ulp at x={x[fin][np.argmax(err)]!r}"


def test_atan2_quadrants_and_zeros() -> None:
    v = np.array([0.0, -0.0, 1.0, -1.0, 3e-39, -2.5, np.inf, -np.inf, np.nan], np.float32)
    y, x = np.meshgrid(v, v, indexing="ij")
    g = lumos.Graph()
    ty, tx = g.tensor(y.shape, lumos.f32), g.tensor(x.shape, lumos.f32)
    (got,) = run([E.atan2(ty, tx)], {ty: y, tx: x})
    want = torch.atan2(torch.from_numpy(y), torch.from_numpy(x)).numpy()
    num = ~np.isnan(want)  # the sign of a NaN is the platform's
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0, equal_nan=True)

"""More elementwise math: inverse trigonometric and hyperbolic functions, tan with range
reduction, atan2, log10, hypot, copysign, signbit, fmax/fmin, ldexp, frexp.

All derived from the primitives through tensor.py's exp/log/expm1/log1p/sqrt/sin. The
formulas reduce the argument first, so that no result loses precision near 0, +-1 or
a pole: atan maps |x| > 1 to pi/2 - atan(1/|x|) and [tan(pi/12), 1] to pi/6 + atan of
a small value, then sums its Taylor series; asin and acos are atans of well-conditioned
ratios; the hyperbolic functions follow fdlibm (expm1 and log1p near 0).
"""

from __future__ import annotations

import math

from lumos.dtype import DType, bf16, f32, f64, i32
from lumos.errors import DTypeError
from lumos.frontend.tensor import (
    Tensor,
    TensorLike,
    _floating,
    _half_safe,
    abs,
    add,
    div,
    eq,
    exp2,
    expm1,
    floor,
    floor_divide,
    isinf,
    isnan,
    lift,
    log,
    log1p,
    log2,
    logical_and,
    logical_not,
    logical_or,
    lt,
    maximum,
    minimum,
    mul,
    neg,
    node,
    reciprocal,
    round,
    sin,
    sqrt,
    sub,
    where,
)

_TAN_PI_12 = 2.0 - math.sqrt(3.0)  # tan(pi/12)
_LN2 = math.log(2.0)


def _terms(x: Tensor, f32_terms: int, f64_terms: int) -> int:
    return f64_terms if x.dtype.bits == 64 else f32_terms


def _negative(x: Tensor) -> Tensor:
    """x < 0, or x is -0.0 (1 / -0.0 is -inf)."""
    return logical_or(lt(x, 0.0), lt(reciprocal(x), 0.0))


def _with_sign(mag: Tensor, negative: Tensor) -> Tensor:
    """-mag where negative, else mag, for mag >= 0: mag + 0 (a -0.0 becomes 0.0) times -1
    or 1, so that zeros get the right sign too (where's select sums padded pieces, which
    turns -0.0 into 0.0)."""
    return mul(add(mag, 0.0), sub(1.0, mul(negative.to(mag.dtype), 2.0)))


def _atan_unit(a: Tensor) -> Tensor:
    """atan(a) for 0 <= a <= 1 (and NaN): a above tan(pi/12) is moved below it by
    atan(a) = pi/6 + atan((a*sqrt3 - 1) / (a + sqrt3)), then the Taylor series."""
    s3 = math.sqrt(3.0)
    far = lt(_TAN_PI_12, a)
    t = where(far, div(sub(mul(a, s3), 1.0), add(a, s3)), a)
    t2 = mul(t, t)
    n = _terms(a, 8, 16)  # |t| <= 0.268: the n-th term is below the dtype's precision
    poly: Tensor | float = (-1.0) ** (n - 1) / (2 * n - 1)
    for k in reversed(range(n - 1)):
        poly = add(mul(t2, poly), (-1.0) ** k / (2 * k + 1))
    r = mul(t, poly)
    return where(far, add(r, math.pi / 6), r)


def _atan_abs(a: Tensor) -> Tensor:
    """atan(a) for a >= 0 (inf included): a > 1 as pi/2 - atan(1/a)."""
    big = lt(1.0, a)
    r = _atan_unit(where(big, reciprocal(a), a))
    return where(big, sub(math.pi / 2, r), r)


@_half_safe
def atan(x: Tensor) -> Tensor:
    return _with_sign(_atan_abs(abs(x)), lt(x, 0.0))


@_half_safe
def asin(x: Tensor) -> Tensor:
    """atan(x / sqrt((1 - x)(1 + x))): 1 - x is exact near 1; |x| > 1 gives NaN."""
    a = abs(x)
    r = _atan_abs(div(a, sqrt(mul(sub(1.0, a), add(a, 1.0)))))
    return _with_sign(r, lt(x, 0.0))


@_half_safe
def acos(x: Tensor) -> Tensor:
    """2 atan(sqrt((1 - x) / (1 + x))), accurate over [-1, 1]; NaN outside."""
    return mul(_atan_abs(sqrt(div(sub(1.0, x), add(x, 1.0)))), 2.0)


def atan2(y: TensorLike, x: TensorLike) -> Tensor:
    """The angle of (x, y) in (-pi, pi], with C's rules for zeros and infinities: the
    sign of y (-0.0 included) is the result's, a negative x (or -0.0) reflects to
    pi - angle. Integers give float32; half precision computes in float32."""
    (y, x), dt = lift([y, x], op="atan2")
    dt = dt if dt.is_float else f32
    ct = f32 if dt.bits < 32 else dt
    y, x = y.to(ct), x.to(ct)
    a, b = abs(y), abs(x)
    base = _atan_abs(div(a, b))
    both_zero = logical_and(eq(a, 0.0), eq(b, 0.0))
    both_inf = logical_and(isinf(a), isinf(b))
    base = where(both_zero, 0.0, where(both_inf, math.pi / 4, base))
    r = where(_negative(x), sub(math.pi, base), base)
    return _with_sign(r, _negative(y)).to(dt)


def _reduce_half_pi(x: Tensor) -> tuple[Tensor, Tensor]:
    """(r, k) with x = k * pi/2 + r, |r| <= pi/4: in float64 (Cody-Waite, pi/2 in three
    parts, each product with k exact), r rounded back to x's dtype."""
    w = x.to(f64)
    k = round(mul(w, 2.0 / math.pi))
    r = sub(w, mul(k, 1.5707963267341256))  # fdlibm's pio2_1: 33 bits, k * it is exact
    r = sub(r, mul(k, 6.077100506303966e-11))  # pio2_2
    r = sub(r, mul(k, 2.0222662487959506e-21))  # pio2_3
    return r.to(x.dtype), k


@_half_safe
def tan(x: Tensor) -> Tensor:
    """|x| < 2**19: tan(r) for even k, -1/tan(r) for odd k, with cos(r) = sin(pi/2 - |r|)
    (well conditioned for |r| <= pi/4). Beyond, where k * pi/2 is no longer exact, in
    float64 from the Sin primitive's own reduction: sin(x) / ((1 - h)(1 + h)) with
    h = sqrt(2) sin(x/2), i.e. cos(x) = 1 - 2 sin(x/2)**2 (its cancellation near a pole
    costs float64 digits a float32 result does not need)."""
    r, k = _reduce_half_pi(x)
    s, c = sin(r), sin(sub(math.pi / 2, abs(r)))
    odd = eq(sub(k, mul(floor(mul(k, 0.5)), 2.0)), 1.0)
    near = where(odd, neg(div(c, s)), div(s, c))
    w = x.to(f64)
    h = mul(sin(mul(w, 0.5)), math.sqrt(2.0))
    far = div(sin(w), mul(sub(1.0, h), add(h, 1.0))).to(x.dtype)
    return where(lt(abs(x), 2.0**19), near, far)


def _exp_reduced(a: Tensor) -> Tensor:
    """exp(a) for 0 <= a (inf once past the dtype's range), accurate to a few units in the
    last place for large a too: a = k ln2 + r with ln2 in two parts (Cody-Waite; k * the
    first part is exact), exp(a) = 2**k * 2**(r / ln2). (exp multiplies a by 1 / ln2
    before Exp2, so its relative error grows with a: 3.6e-6 at a = 50 in float32.)"""
    hi, lo = (0.693359375, -2.12194440e-4) if a.dtype.bits < 64 else (
        6.93147180369123816490e-01, 1.90821492927058770002e-10)
    ac = minimum(where(isnan(a), 0.0, a), 800.0 if a.dtype.bits < 64 else 1500.0)  # cast safe
    k = mul(ac, 1.0 / _LN2).to(i32).to(a.dtype)  # truncated: 0 <= r < ln2 (about)
    r = sub(sub(ac, mul(k, hi)), mul(k, lo))
    return where(isnan(a), a, mul(exp2(k), exp2(mul(r, 1.0 / _LN2))))


@_half_safe
def sinh(x: Tensor) -> Tensor:
    """|x| < 1: (u + u / (u + 1)) / 2 with u = expm1(|x|); beyond: h*h/2 - 1/(2 h*h) with
    h = exp(|x| / 2) (no overflow before sinh itself overflows)."""
    a = abs(x)
    u = expm1(a)
    small = mul(add(u, div(u, add(u, 1.0))), 0.5)
    h = _exp_reduced(mul(a, 0.5))
    large = sub(mul(mul(h, 0.5), h), div(div(0.5, h), h))
    return _with_sign(where(lt(a, 1.0), small, large), lt(x, 0.0))


@_half_safe
def cosh(x: Tensor) -> Tensor:
    h = _exp_reduced(mul(abs(x), 0.5))
    return add(mul(mul(h, 0.5), h), div(div(0.5, h), h))


@_half_safe
def asinh(x: Tensor) -> Tensor:
    """fdlibm: log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x| <= 2, log(2a + 1 / (a +
    sqrt(a^2 + 1))) up to 2^28, log(a) + log(2) beyond."""
    a = abs(x)
    a2 = mul(a, a)
    small = log1p(add(a, div(a2, add(sqrt(add(a2, 1.0)), 1.0))))
    mid = log(add(mul(a, 2.0), reciprocal(add(sqrt(add(a2, 1.0)), a))))
    huge = add(log(a), _LN2)
    r = where(lt(a, 2.0), small, where(lt(a, 2.0**28), mid, huge))
    return _with_sign(r, lt(x, 0.0))


@_half_safe
def acosh(x: Tensor) -> Tensor:
    """fdlibm: log1p(t + sqrt(2t + t^2)) with t = x - 1 for x <= 2, log(2x - 1 / (x +
    sqrt(x^2 - 1))) up to 2^28, log(x) + log(2) beyond; NaN below 1."""
    t = sub(x, 1.0)
    small = log1p(add(t, sqrt(add(mul(t, 2.0), mul(t, t)))))
    mid = log(sub(mul(x, 2.0), reciprocal(add(x, sqrt(sub(mul(x, x), 1.0))))))
    huge = add(log(x), _LN2)
    r = where(lt(x, 2.0), small, where(lt(x, 2.0**28), mid, huge))
    return where(lt(x, 1.0), math.nan, r)


@_half_safe
def atanh(x: Tensor) -> Tensor:
    """fdlibm: log1p(2a + 2a^2 / (1 - a)) / 2 for a = |x| < 1/2, log1p(2a / (1 - a)) / 2
    above; +-inf at +-1, NaN beyond."""
    a = abs(x)
    small = log1p(add(mul(a, 2.0), div(mul(mul(a, a), 2.0), sub(1.0, a))))
    large = log1p(div(mul(a, 2.0), sub(1.0, a)))
    r = mul(where(lt(a, 0.5), small, large), 0.5)
    return _with_sign(r, lt(x, 0.0))


@_half_safe
def log10(x: Tensor) -> Tensor:
    return mul(log2(x), math.log10(2.0))


def hypot(a: TensorLike, b: TensorLike) -> Tensor:
    """m * sqrt(1 + (n/m)^2) with m = max(|a|, |b|), n the other (no overflow); inf if
    either is inf, even with a NaN."""
    (x, y), dt = lift([a, b], op="hypot")
    if not dt.is_float:
        raise DTypeError(f"hypot: needs floating point inputs, got {dt.name}")
    if dt.bits <= 32:  # float64 holds every square of a float32
        x, y = x.to(f64), y.to(f64)
        r = sqrt(add(mul(x, x), mul(y, y)))
    else:  # moved into a safe range by a power of two (exact), scaled back after
        x, y = abs(x), abs(y)
        m, n = maximum(x, y), minimum(x, y)
        scale = where(lt(m, 2.0**-500), 2.0**600, where(lt(2.0**500, m), 2.0**-600, 1.0))
        ms, q = mul(m, scale), div(mul(n, scale), mul(m, scale))
        r = where(eq(m, 0.0), 0.0, div(mul(ms, sqrt(add(mul(q, q), 1.0))), scale))
    return where(logical_or(isinf(x), isinf(y)), math.inf, r).to(dt)


def copysign(a: TensorLike, b: TensorLike) -> Tensor:
    """|a| with the sign of b (-0.0 counts as negative); integers compute as float32."""
    (x, y), dt = lift([a, b], op="copysign")
    ft = dt if dt.is_float else f32
    x, y = x.to(ft), y.to(ft)
    return _with_sign(abs(x), _negative(y))


def signbit(x: Tensor) -> Tensor:
    if x.dtype.is_bool or not x.dtype.signed:
        return lt(x, 0) if not x.dtype.is_bool else logical_and(x, False)
    return _negative(x) if x.dtype.is_float else lt(x, 0)


def fmax(a: TensorLike, b: TensorLike) -> Tensor:
    """The larger of a and b, ignoring a NaN (NaN only where both are)."""
    return _nan_ignoring(a, b, maximum)


def fmin(a: TensorLike, b: TensorLike) -> Tensor:
    return _nan_ignoring(a, b, minimum)


def _nan_ignoring(a: TensorLike, b: TensorLike, fn: object) -> Tensor:
    (x, y), dt = lift([a, b], op="fmax")
    m = fn(x, y)  # type: ignore[operator]
    if not dt.is_float:
        return m
    return where(isnan(x), y, where(isnan(y), x, m))


def ldexp(a: TensorLike, b: TensorLike) -> Tensor:
    """a * 2**b, as torch.ldexp computes it (integer inputs give float32)."""
    (x, y), dt = lift([a, b], op="ldexp")
    ft = dt if dt.is_float else f32
    return mul(x.to(ft), exp2(y.to(ft)))


def frexp(x: Tensor) -> tuple[Tensor, Tensor]:
    """(mantissa, int32 exponent) with x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    (0, inf and NaN keep x with exponent 0). The estimate floor(log2|x|) + 1 is corrected by one
    step either way (powers of two are exact)."""
    xf = _floating(x)
    dt: DType = xf.dtype
    a = abs(xf)
    ok = logical_and(lt(0.0, a), logical_not(isinf(a)))
    e = add(floor(log2(where(ok, a, 1.0))), 1.0)
    half = floor(mul(e, -0.5))  # 2**-e in two factors: each in range for subnormal x
    m = mul(mul(a, exp2(half)), exp2(sub(neg(e), half)))
    up = logical_not(lt(m, 1.0))
    e, m = where(up, add(e, 1.0), e), where(up, mul(m, 0.5), m)
    down = lt(m, 0.5)
    e, m = where(down, sub(e, 1.0), e), where(down, mul(m, 2.0), m)
    mant = where(ok, _with_sign(m, lt(xf, 0.0)), xf)
    return mant.to(dt), where(ok, e, 0.0).to(i32)


for _fn in (atan, asin, acos, atan2, tan, sinh, cosh, asinh, acosh, atanh, log10, hypot,
            copysign, signbit, fmax, fmin, ldexp, frexp):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.arctan, Tensor.arcsin, Tensor.arccos, Tensor.arctan2 = atan, asin, acos, atan2


def _euclid_steps(dt: DType) -> int:
    """Euclid's algorithm needs at most k steps below the Fibonacci number F(k + 2)."""
    bound, a, b, k = 1 << dt.bits, 1, 1, 0
    while b < bound:
        a, b, k = b, a + b, k + 1
    return k


def gcd(a: TensorLike, b: TensorLike) -> Tensor:
    """The greatest common divisor (non-negative): Euclid's algorithm unrolled for the
    dtype's worst case (92 steps for int64: consecutive Fibonacci numbers), each step
    (a, b) -> (b, a mod b) while b != 0 (a zero b replaced by 1 before the Mod)."""
    (x, y), dt = lift([a, b], op="gcd")
    if not dt.is_int:
        raise DTypeError(f"gcd: needs integer inputs, got {dt.name}")
    x, y = abs(x), abs(y)
    for _ in range(_euclid_steps(dt)):
        live = lt(0, y)
        r = node(x.graph, "Mod", [x, where(live, y, 1)])
        x, y = where(live, y, x), where(live, r, y)
    return x


def lcm(a: TensorLike, b: TensorLike) -> Tensor:
    """|a / gcd(a, b) * b| (0 if both are 0), as PyTorch computes it; the quotient goes
    through float64, exact while |a| < 2**53."""
    (x, y), dt = lift([a, b], op="lcm")
    g = gcd(x, y)
    q = floor_divide(x, where(eq(g, 0), 1, g))
    return where(eq(g, 0), 0, abs(mul(q, y))).to(dt)


for _fn in (gcd, lcm):
    setattr(Tensor, _fn.__name__, _fn)


def nextafter(a: TensorLike, b: TensorLike) -> Tensor:
    """The next float after a toward b: a plus or minus one unit in the last place of a,
    the unit taken from frexp (half of it stepping down past a power of two toward 0), at
    least the smallest subnormal; b where a == b, NaN if either is."""
    (x, y), dt = lift([a, b], op="nextafter")
    if not dt.is_float:
        raise DTypeError(f"nextafter: needs floating point inputs, got {dt.name}")
    ct = f64 if dt.bits <= 32 else dt  # float32's units are exact float64 powers of two
    bits, tiny = (8, -133) if dt is bf16 else {64: (53, -1074), 32: (24, -149),
                                                 16: (11, -24)}[dt.bits]
    xf, yf = x.to(ct), y.to(ct)
    m, e = frexp(xf)
    e = e.to(ct)
    up = logical_or(lt(xf, yf), logical_and(eq(xf, 0.0), lt(0.0, yf)))  # toward +inf
    away = logical_and(logical_not(eq(xf, 0.0)), eq(up, lt(0.0, xf)))
    at_power = eq(abs(m), 0.5)
    unit = exp2(maximum(sub(e, float(bits)), float(tiny)))
    unit = where(logical_and(at_power, logical_not(away)),
                 maximum(mul(unit, 0.5), 2.0 ** tiny), unit)
    r = where(up, add(xf, unit), sub(xf, unit))
    r = where(eq(xf, yf), yf, r)
    return where(logical_or(isnan(xf), isnan(yf)), math.nan, r).to(dt)


Tensor.nextafter = nextafter

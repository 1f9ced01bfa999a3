#!/usr/bin/env python3
"""Fits the polynomials of src/cuda/primitives/exp2_fma.cuh: p(f) ~ 2^f on [0, 1] with p(0) = 1
exactly, minimizing the largest relative error |p(f) / 2^f - 1| (a linear program over a dense
grid of f), then rounds the coefficients to float32 and measures the float32 Horner evaluation
(fma at each step, as the GPU's FFMA and the host's fmaf compute it) on 4M float32 points of
[0, 1]. Prints the coefficients as C++ float literals and the error; the figure the kernels rely
on is measured by tests/cuda/exp2_fma_test.cc.

  python3 tools/fit_exp2_poly.py [degree ...]      default 3 4      (needs numpy and scipy)

The closed interval matters: x just below 0 gives f = x - floor(x) = x + 1 rounded up to 1.0f
(x = -2^-30: f = 1 - 2^-30 rounds to 1), so p(1) / 2 is what the function returns there.
"""
import sys

import numpy as np
from scipy.optimize import linprog


def fit(degree, points=20001):
    """Coefficients c1..c_degree of 1 + c1 f + ... minimizing the max relative error."""
    f = np.linspace(0.0, 1.0, points)
    inv = np.exp2(-f)
    powers = np.stack([f**k * inv for k in range(1, degree + 1)], axis=1)  # sum c_k f^k / 2^f
    ones = np.ones((points, 1))
    # Variables (c_1..c_degree, t); r(f) = (1 + sum c_k f^k) / 2^f - 1, -t <= r <= t.
    a_ub = np.vstack([np.hstack([powers, -ones]), np.hstack([-powers, -ones])])
    b_ub = np.concatenate([1.0 - inv, inv - 1.0])
    cost = np.zeros(degree + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * (degree + 1),
                  method="highs")
    if not res.success:
        raise RuntimeError(res.message)
    return res.x[:degree], res.x[degree]


def fma32(a, b, c):
    """float32 fma: a * b is exact in float64 (2 x 24 bits), the sum is rounded once to 53
    bits and once to 24 (a double rounding that can differ from the true fma only at a tie,
    which the C++ test's std::fma settles)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def horner32(coeffs32, f32):
    """1 + f (c1 + f (c2 + ...)), innermost first, as exp2_fma.cuh evaluates it."""
    acc = np.full_like(f32, coeffs32[-1])
    for c in coeffs32[-2::-1]:
        acc = fma32(acc, f32, np.full_like(f32, c))
    return fma32(acc, f32, np.ones_like(f32))


def measure(coeffs32, samples=1 << 22):
    f32 = np.unique(np.concatenate([np.linspace(0.0, 1.0, samples, dtype=np.float32),
                                    np.float32(1.0) - np.arange(64, dtype=np.float32) * 2**-24]))
    p = horner32(coeffs32, f32).astype(np.float64)
    rel = np.abs(p / np.exp2(f32.astype(np.float64)) - 1.0)
    return rel.max(), float(f32[rel.argmax()])


def main():
    degrees = [int(a) for a in sys.argv[1:]] or [3, 4]
    for degree in degrees:
        coeffs, t = fit(degree)
        coeffs32 = np.array(coeffs, dtype=np.float32)
        worst, at = measure(coeffs32)
        print(f"degree {degree}: LP max relative error {t:.4g}; float32 coefficients, "
              f"float32 Horner: {worst:.4g} (at f = {at:.9g})")
        for k, c in enumerate(coeffs32, start=1):
            print(f"  c{k} = {np.format_float_scientific(c, unique=True)}f  "
                  f"({float(c).hex()})")


if __name__ == "__main__":
    main()

"""The softcap polynomial's coefficients (src/common/softcap.cc kTanhOverX): a minimax fit of
tanh(x) / x by P(x^2) on |x| <= LIMIT for the absolute error of x P(x^2) - tanh(x), by Lawson's
iteration (weighted least squares, each point's weight multiplied by its error until the error
equioscillates), in float64 on evenly spaced points of (0, LIMIT] (the function is odd).

    python3 tools/softcap/fit.py                 # the shipped fit: 5 terms on |x| <= 3/4
    python3 tools/softcap/fit.py --terms 4 --limit 0.5

Prints the coefficients as C++ and the fit's largest error (1.85e-7 for the shipped one).
tests/python/test_softcap_fit.py checks that softcap.cc holds this fit.
"""
import argparse

import numpy as np


def fit(terms: int, limit: float, points: int = 20000, iters: int = 2000):
    """Coefficients c_k of P(u) = sum c_k u^k, and max |x P(x^2) - tanh(x)| on the points."""
    x = np.linspace(0.0, limit, points + 1)[1:]
    a = np.stack([x ** (2 * k + 1) for k in range(terms)], axis=1)
    y = np.tanh(x)
    w = np.full(x.shape, 1.0 / x.size)
    c = np.zeros(terms)
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], y * sw, rcond=None)
        w = w * np.abs(a @ c - y)
        w /= w.sum()
    return c, float(np.max(np.abs(a @ c - y)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--terms", type=int, default=5, help="terms of P (degree + 1)")
    p.add_argument("--limit", type=float, default=0.75, help="the fit's interval |x| <= LIMIT")
    a = p.parse_args()
    c, err = fit(a.terms, a.limit)
    print(f"// tanh(x) / x ~ sum c[k] x^(2k) on |x| <= {a.limit}: max abs error {err:.3g}")
    print("constexpr double kTanhOverX[] = {")
    print("    " + ", ".join(repr(float(v)) for v in c) + ",")
    print("};")


if __name__ == "__main__":
    main()

"""src/common/softcap.cc's coefficients are tools/softcap/fit.py's fit (5 terms on |x| <= 3/4):
the same numbers to float32 precision and the fit's error, so the code's polynomial can be
regenerated and changed (tests/common/softcap_test.cc checks its float32 steps)."""
import re

import numpy as np
from helpers import ROOT, load_tool


def test_softcap_cc_holds_the_fit():
    mod = load_tool("tools/softcap/fit.py")
    src = (ROOT / "src" / "common" / "softcap.cc").read_text()
    body = re.search(r"kTanhOverX\[[^\]]*\] = \{([^}]*)\}", src).group(1)
    shipped = np.array([float(v) for v in body.replace("\n", " ").split(",") if v.strip()])
    limit = float(re.search(r"kFitLimit = ([0-9.]+)", src).group(1))
    c, err = mod.fit(len(shipped), limit, iters=1000)
    assert len(shipped) == 5 and limit == 0.75
    np.testing.assert_allclose(c, shipped, rtol=2e-6, atol=1e-8)
    assert err < 1.9e-7  # softcap.h: 1.85e-7 in float64
    x = np.linspace(0.0, limit, 4001)
    shipped_err = np.max(np.abs(x * np.polyval(shipped[::-1], x * x) - np.tanh(x)))
    assert shipped_err < 1.9e-7

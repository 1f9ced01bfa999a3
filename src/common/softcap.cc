#include "common/softcap.h"

#include <cmath>

#include "common/math_constants.h"

namespace flashattn {
namespace {

// tanh(x) / x ~ sum kTanhOverX[k] x^{2k} on |x| <= 3/4 (softcap.h). c0 is not 1: the minimax
// spreads the absolute error over the interval rather than holding it at 0 for small x (there a
// relative error of 2.8e-6, an absolute one under 2.7e-7 like everywhere else).
constexpr double kTanhOverX[SoftcapConsts::kPolyTerms] = {
    0.9999972282689462, -0.3332307632633628, 0.13226090388288128, -0.049280412225384554,
    0.012318799563123043,
};
constexpr double kFitLimit = 0.75;  // the fit's interval, in x = s / cap

}  // namespace

SoftcapConsts make_softcap_consts(float softcap, float scale) {
  SoftcapConsts c;
  if (!(softcap > 0.0f)) return c;
  c.cap = softcap / scale;
  c.neg_two_cap = -2.0f * c.cap;
  c.tanh_in = 2.0f * kLog2e * scale / softcap;

  const double cap = static_cast<double>(softcap) / static_cast<double>(scale);
  const double limit = kFitLimit * cap;
  if (!std::isfinite(static_cast<float>(limit * limit))) return c;  // s^2 would overflow
  float poly[SoftcapConsts::kPolyTerms];
  double inv_cap2k = 1.0;
  for (int k = 0; k < SoftcapConsts::kPolyTerms; ++k) {
    poly[k] = static_cast<float>(kTanhOverX[k] * inv_cap2k);
    if (!std::isnormal(poly[k])) return c;  // folded past float's range: the exact form only
    inv_cap2k /= cap * cap;
  }
  for (int k = 0; k < SoftcapConsts::kPolyTerms; ++k) c.poly[k] = poly[k];
  c.poly_limit = static_cast<float>(limit);
  return c;
}

}  // namespace flashattn

"""The fixed head of every generated translation unit: includes and the scalar helpers.

The same helpers serve the C++ and the SYCL source; `math` names the namespace of the math
functions (`std` on the host, `sycl` in SYCL device code). A translation unit gets only the helpers
its code calls (and the helpers those call), in the order below, inside one anonymous namespace.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

INCLUDES = r"""#include <cstdint>
#include <cstddef>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
"""


HIDDEN = "#pragma GCC visibility push(hidden)\n"  # what follows is seen by the library only
HIDDEN_END = "#pragma GCC visibility pop\n"


@dataclass(frozen=True)
class Helper:
    """One definition of the prelude, emitted when the code names it (`tg_...`)."""

    name: str
    text: str
    shared: bool = False  # state every translation unit of a library shares: outside the anonymous namespace


HELPERS: tuple[Helper, ...] = (
    Helper("tg_max", r"""template <class A, class B> inline auto tg_max(A a, B b) {
  using T = decltype(a + b);
  T x = (T)a, y = (T)b;
  if constexpr (std::is_floating_point_v<T>) { if (x != x) return x; }
  return x > y ? x : (x == x ? y : x);
}
"""),
    Helper("tg_min", r"""template <class A, class B> inline auto tg_min(A a, B b) {
  using T = decltype(a + b);
  T x = (T)a, y = (T)b;
  if constexpr (std::is_floating_point_v<T>) { if (x != x) return x; }
  return x < y ? x : (x == x ? y : x);
}
"""),
    Helper("tg_div", r"""template <class A, class B> inline auto tg_div(A a, B b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) return (double)a / (double)b;
  else return a / b;
}
"""),
    Helper("tg_pow", r"""template <class A, class B> inline auto tg_pow(A a, B b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
    decltype(a * b) r = 1, base = a;
    for (int64_t e = (int64_t)b; e > 0; --e) r *= base;
    return r;
  } else {
    // small integral exponents as products: with a literal exponent the test folds away and the
    // loop vectorises (a pow call would keep it scalar)
    using T = decltype(a + b);
    const T x = (T)a, y = (T)b;
    if (y == (T)2) return x * x;
    if (y == (T)3) return x * x * x;
    if (y == (T)1) return x;
    return (T)TG_MATH::pow(x, y);
  }
}
"""),
    Helper("tg_abs", r"""template <class A> inline A tg_abs(A a) {
  if constexpr (std::is_same_v<A, bool>) return a;
  else if constexpr (std::is_floating_point_v<A>) return TG_MATH::fabs(a);
  else return a < 0 ? (A)-a : a;
}
"""),
    Helper("tg_fexp", r"""// exp in float with only arithmetic and selects, so loops calling it vectorise (libm calls do not):
// Cody-Waite reduction x = n ln2 + r, a degree-6 polynomial for e^r, 2^n from the exponent bits.
// Within 2 ulp of expf; inf, -inf (-> 0), NaN and overflow behave as expf does.
inline float tg_fexp(float x) {
  const float c = x < -88.0f ? -88.0f : (x > 88.0f ? 88.0f : x);
  const float n = TG_MATH::floor(c * 1.44269504f + 0.5f);
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float y = p * scale;
  y = x < -87.5f ? 0.0f : y;
  y = x > 88.7f ? INFINITY : y;
  return x != x ? x : y;
}
"""),
    Helper("tg_ferf", r"""// erf(x) = 1 - poly(t) exp(-x^2), t = 1 / (1 + p|x|) (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7);
// below 0.25 its Maclaurin series.
inline float tg_ferf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float big = 1.0f - poly * tg_fexp(-a * a);
  const float x2 = a * a;  // small |x|: the Maclaurin series keeps the relative error small
  const float small = 1.12837917f * a * (1.0f + x2 * (-1.0f / 3.0f + x2 * (0.1f + x2 * (-1.0f / 42.0f + x2 / 216.0f))));
  const float y = a < 0.25f ? small : big;
  return x != x ? x : (x < 0.0f ? -y : y);
}
"""),
    Helper("tg_exp", r"""template <class A> inline auto tg_exp(A a) {
  if constexpr (TG_FAST_FLOAT && std::is_same_v<A, float>) return tg_fexp(a);
  else return TG_MATH::exp(a);
}
"""),
    Helper("tg_log", r"""template <class A> inline auto tg_log(A a) { return TG_MATH::log(a); }
"""),
    Helper("tg_sqrt", r"""template <class A> inline auto tg_sqrt(A a) { return TG_MATH::sqrt(a); }
"""),
    Helper("tg_tanh", r"""template <class A> inline auto tg_tanh(A a) {
  if constexpr (TG_FAST_FLOAT && std::is_same_v<A, float>) {
    // 1 - 2 / (e^2x + 1), with small |x| from its series (the subtraction would cancel there)
    const float e = tg_fexp(2.0f * a);
    const float big = 1.0f - 2.0f / (e + 1.0f);
    const float a2 = a * a;
    const float small = a * (1.0f + a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f))));
    return (a < 0.0625f && a > -0.0625f) ? small : big;
  } else {
    return TG_MATH::tanh(a);
  }
}
"""),
    Helper("tg_erf", r"""template <class A> inline auto tg_erf(A a) {
  if constexpr (TG_FAST_FLOAT && std::is_same_v<A, float>) return tg_ferf(a);
  else return TG_MATH::erf(a);
}
"""),
    Helper("tg_rsqrt", r"""template <class A> inline A tg_rsqrt(A a) { return (A)1 / TG_MATH::sqrt(a); }
"""),
    Helper("tg_sigmoid", r"""template <class A> inline A tg_sigmoid(A a) { return (A)1 / (tg_exp(-a) + (A)1); }
"""),
    Helper("tg_lmin", r"""inline int64_t tg_lmin(int64_t a, int64_t b) { return a < b ? a : b; }
"""),
    Helper("tg_lmax", r"""inline int64_t tg_lmax(int64_t a, int64_t b) { return a > b ? a : b; }
"""),
    Helper("tg_bf16", r"""inline float tg_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += ((bits >> 16) & 1u) + 0x7fffu;
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}
"""),
)

_NAME = re.compile(r"\b(?:tg|TG)_\w+")


def used_helpers(text: str, helpers: Sequence[Helper]) -> list[Helper]:
    """The helpers `text` names, with the helpers they name in turn, in `helpers` order (a helper
    only names helpers before it)."""
    by_name = {h.name: h for h in helpers}
    wanted = {m for m in _NAME.findall(text) if m in by_name}
    for helper in reversed(helpers):  # every helper names only earlier ones: one backward pass
        if helper.name in wanted:
            wanted.update(m for m in _NAME.findall(helper.text) if m in by_name)
    return [h for h in helpers if h.name in wanted]


def prelude(math_namespace: str = "std", fast_float: bool = True, used: str | None = None,
            extra: Sequence[Helper] = ()) -> str:
    """The includes and the helpers `used` (the rest of the translation unit) names, from these
    and the dialect's `extra` ones (all of them when `used` is None), with the math functions taken
    from `math_namespace`; `fast_float`: f32 exp, erf, tanh and sigmoid from the vectorisable
    versions above instead of libm calls."""
    helpers = (*HELPERS, *extra)
    chosen = list(helpers) if used is None else used_helpers(used, helpers)
    text = "".join(h.text for h in chosen)  # what the macros below look for
    head = ""
    if "TG_MATH" in text:
        head += f"#define TG_MATH {math_namespace}\n"
    if "TG_FAST_FLOAT" in text:
        head += f"#define TG_FAST_FLOAT {int(fast_float)}\n"
    shared = "".join(h.text for h in chosen if h.shared)
    local = "".join(h.text for h in chosen if not h.shared)
    body = f"\nnamespace {{\n\n{local}\n}}  // namespace\n" if local else ""
    if shared:  # one instance per library, not exported from it
        shared = f"\n{HIDDEN}{shared}{HIDDEN_END}"
    return head + INCLUDES + shared + body

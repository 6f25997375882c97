"""Numbers as ECMAScript writes them: the canonical JSON of the request fingerprint (``JSON.stringify``) and, with
ClickHouse's exponent spelling, the JSON ClickHouse re-serializes (:mod:`loop_detector_sdk.evidence.clickhouse_json`)."""

from __future__ import annotations

__all__ = ["js_number"]


def js_number(x: float) -> str:
    """``x`` as ECMAScript's ``Number.prototype.toString`` writes it (and so ``JSON.stringify``).

    Python's ``repr`` and V8 both give the shortest digits that round-trip (the closest of them on a tie);
    only the layout differs: plain digits up to 21 integer digits, ``0.000001`` down to 1e-6, else
    ``d.ddde+n`` / ``de-n``."""
    if x != x or x in (float("inf"), float("-inf")):
        return "null"
    if x == 0:
        return "0"  # -0 too
    text = repr(abs(x))
    mantissa, _, exp_text = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    exponent = (int(exp_text) if exp_text else 0) - len(frac)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = exponent + k  # value = 0.digits * 10**n
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        e = n - 1
        sign = "+" if e >= 0 else "-"
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + sign + str(abs(e))
    return "-" + out if x < 0 else out

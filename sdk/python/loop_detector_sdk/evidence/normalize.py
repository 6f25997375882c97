"""The service's normalization of content, in the app: the same regular expressions, in the same order, as the
normalization's (``clickhouse/genai_calls_normalized.sql.tmpl``, step 2c: "incidental variation normalized"), so that a
normalized text here is byte for byte the one the SQL hashes.

ClickHouse runs them with RE2 over UTF-8 bytes; Python's ``re`` runs them over code points with ``re.ASCII``:
every pattern here is ASCII-only, so both match the same spans. RE2's ``\\s`` is ``[\\t\\n\\f\\r ]`` (no vertical
tab) and its ``$`` is the end of the text only: both are spelled out. ``trimBoth`` strips spaces only and
``lower`` lowercases ASCII letters only; so do :func:`normalize` and :func:`is_empty_observation`. The failure and
pending vocabularies match case-insensitively (RE2's ``(?i)``), here with ASCII case folding: RE2 also folds the
Kelvin sign into ``k`` and the long s into ``s``, which no text in practice spells those words with.
"""

from __future__ import annotations

import re

from loop_detector_sdk.evidence.clickhouse_json import object_pairs, pairs_text

__all__ = ["canonical_text", "digits_masked", "is_empty_observation", "is_failed", "is_pending", "normalize",
           "without_keys"]

_S = r"[\t\n\f\r ]"  # RE2's \s
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
                        r"|\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b", re.ASCII)
_DURATION = re.compile(rf"(took|elapsed|duration|latency)(_ms|_s|_us)?(['\"]*{_S}*[:=,]{_S}*['\"]*)\d+(\.\d+)?"
                       rf"|\b\d+(\.\d+)?{_S}?(ms|us|ns|s|secs?|seconds|minutes)\b", re.ASCII)
_ID = re.compile(r"(0x)?[0-9a-fA-F]{8,}|[A-Za-z_][\w\-]*\d[\w\-]*|\d+[A-Za-z_][\w\-]*", re.ASCII)
_SPACES = re.compile(rf"{_S}+")
_KEY = re.compile(rf'\\?"[\w .\-]{{1,64}}\\?"{_S}*:{_S}*', re.ASCII)
_DIGITS = re.compile(r"\d+", re.ASCII)
_EMPTY = re.compile(
    rf'"(results|items|hits|matches|documents|records|entries|rows|data)"{_S}*:{_S}*\[{_S}*\]'
    rf'|"(total|count|hits|total_count|num_results)"{_S}*:{_S}*0\b'
    r"|\bno (results?|matches|documents?|items?|records?|entries|hits|data)\b|\bnot found\b|\bnothing (found|matched)\b"
    rf"|^{_S}*(null|none|\[{_S}*\]|\{{{_S}*\}})?{_S}*\Z", re.ASCII)
# What came back says it failed (an error, a traceback, a refusal, a non-zero return code): the normalization's
# observation_failed; and that the work is still in progress (a status of queued, running...): observation_pending.
# (both run over the text lowercased, ASCII letters only: the same matches as RE2's (?i) with ASCII folding, faster
# than re.IGNORECASE over an alternation)
_FAILED = re.compile(
    r"\b(error|exception|traceback|fatal|failed|failure|denied|not found|no such|cannot|can't|could not|unable to"
    r"|invalid|unexpected|refused|timed out|not recognized)\b|\busage:|<returncode>[1-9]", re.ASCII)
_PENDING = re.compile(
    rf'\b(status|state|phase)\\?"?{_S}*[:=]{_S}*\\?"?(queued|pending|running|in[ _-]?progress|processing|started'
    r"|scheduled|waiting|not[ _-]?ready|building|deploying|provisioning|creating|initializing)\b", re.ASCII)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def canonical_text(text: str) -> str:
    """A JSON object as its sorted key/value pairs (``toString(arraySort(JSONExtractKeysAndValuesRaw(t)))``: key
    order and whitespace no longer matter), any other text as it is."""
    if text[:1] in ("{", " ", "\t", "\n", "\r", "\ufeff"):
        pairs = object_pairs(text)
        if pairs is not None:
            return pairs_text(pairs)
    return text


def normalize(text: str) -> str:
    """UUIDs, timestamps, dates, times, durations, hex runs and ids that mix letters and digits replaced by
    ``<uuid>``, ``<ts>``, ``<dur>``, ``<id>``; whitespace collapsed; a JSON object canonical. Plain numbers stay:
    a count or a page number is information."""
    out = _UUID.sub("<uuid>", canonical_text(text))
    out = _TIMESTAMP.sub("<ts>", out)
    out = _DURATION.sub(r"\1\2\3<dur>", out)
    out = _ID.sub("<id>", out)
    return _SPACES.sub(" ", out).strip(" ")


def without_keys(text: str) -> str:
    """``text`` with its JSON keys (``"name":``) taken out: records then differ by what they say, not by the
    field names they all share (the observation SimHash is over this)."""
    return _KEY.sub("", text)


def digits_masked(text: str) -> str:
    """Every run of digits as ``#`` (the arguments SimHash: a shifted offset is the same action reworded)."""
    return _DIGITS.sub("#", text)


def is_empty_observation(text: str) -> bool:
    """The observation says "nothing": no results, not found, an empty list or object, null."""
    if text == "":
        return False
    lowered = text.translate(_ASCII_LOWER)
    # every alternative needs a quote, "no", a bracket, or a text that is null, none or blank: skip the scan else
    if '"' not in lowered and "no" not in lowered and "[" not in lowered and "{" not in lowered and \
            lowered.strip("\t\n\f\r ") not in ("", "null"):
        return False
    return _EMPTY.search(lowered) is not None


# Every match of _FAILED / _PENDING holds one of these: a text without any is scanned no further (a substring search
# is a fraction of the regular expression's cost, and most results say neither)
_FAILED_WORDS = ("error", "exception", "traceback", "fatal", "fail", "denied", "not found", "no such", "cannot",
                 "can't", "could not", "unable to", "invalid", "unexpected", "refused", "timed out", "not recognized",
                 "usage:", "<returncode>")
_PENDING_WORDS = ("status", "state", "phase")


def is_failed(text: str) -> bool:
    """The text says it failed (``observation_failed``): an error, a traceback, a refusal, a non-zero return code."""
    lowered = text.translate(_ASCII_LOWER)
    return any(w in lowered for w in _FAILED_WORDS) and _FAILED.search(lowered) is not None


def is_pending(text: str) -> bool:
    """The text says the work is still in progress (``observation_pending``): a status of queued, running..."""
    lowered = text.translate(_ASCII_LOWER)
    return any(w in lowered for w in _PENDING_WORDS) and _PENDING.search(lowered) is not None

"""The service's normalization of content, in the app: the same regular expressions, in the same order, as the
normalization's (``clickhouse/genai_calls_normalized.sql.tmpl``, step 2c: "incidental variation normalized"), so that a
normalized text here is byte for byte the one the SQL hashes.

ClickHouse runs them with RE2 over UTF-8 bytes; Python's ``re`` runs them over code points with ``re.ASCII``:
every pattern here is ASCII-only, so both match the same spans. RE2's ``\\s`` is ``[\\t\\n\\f\\r ]`` (no vertical
tab) and its ``$`` is the end of the text only: both are spelled out. ``trimBoth`` strips spaces only and
``lower`` lowercases ASCII letters only; so do :func:`normalize` and :func:`is_empty_observation`. The failure,
pending and acknowledgement vocabularies match case-insensitively (RE2's ``(?i)``), here with ASCII case folding: RE2
also folds the Kelvin sign into ``k`` and the long s into ``s``, which no text in practice spells those words with.
"""

from __future__ import annotations

import re

from loop_detector_sdk.evidence.clickhouse_json import object_pairs, pairs_text

__all__ = ["canonical_text", "digits_masked", "first_line", "is_ack", "is_empty_observation", "is_failed",
           "is_pending", "normalize", "without_keys"]

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
# The work in progress (clickhouse/genai_calls_normalized.sql.tmpl, step 2c: said_pending): a status word as a status,
# state or phase, or as the whole text; or, in a text that does not say it failed, a phrase
_STATUS_WORDS = (r"queued|pending|running|in[ _-]?progress|processing|started|starting|scheduled|waiting|not[ _-]?ready"
                 r"|building|deploying|provisioning|creating|initializing|progressing|rolling out|updating|scaling"
                 r"|booting|accepted|submitted|working|busy")
_PENDING = re.compile(rf'\b(status|state|phase)\\?"?{_S}*[:=]{_S}*\\?"?({_STATUS_WORDS})\b', re.ASCII)
_PENDING_WORD = re.compile(rf"{_S}*[\"']?({_STATUS_WORDS})(\.|\.\.\.)?[\"']?{_S}*\Z", re.ASCII)
_PENDING_PHRASE = re.compile(
    r"\b(not (yet )?ready|still (running|processing|pending|in progress|working|building|deploying|waiting|initializing"
    r"|starting|creating|provisioning|updating)|in progress|queued|waiting for)\b"
    rf"|\bprogress\W{{0,3}}\d{{1,3}}(\.\d+)?{_S}?%", re.ASCII)
# What came back only acknowledges what was done (step 3: observation_ack), on its first line (:func:`first_line`),
# lowercased; each alternative is documented with its examples in the SQL. And a whole text that is a JSON
# acknowledgement.
_ACK_VERBS = (r"edited|updated|created|written|wrote|saved|modified|changed|applied|deleted|removed|added|inserted"
              r"|replaced|renamed|moved|uploaded|attached|installed|restarted|deployed|reverted|appended|overwritten"
              r"|stored|recorded|scheduled|committed|sent|posted|submitted|set")
_ACK_LINE_VERBS = (r"edited|updated|created|written|wrote|saved|modified|changed|applied|deleted|removed|added"
                   r"|inserted|replaced|renamed|moved|uploaded|attached|installed|restarted|deployed|reverted|appended"
                   r"|overwritten|stored|recorded|committed")
_ACK = re.compile(
    r"\W*(?:"
    rf"(?:the{_S}+|a{_S}+)?(?:command|process|script|operation|task|job){_S}+(?:completed|finished|succeeded|ran)"
    rf"(?:{_S}+successfully)?(?:{_S}+with{_S}+exit{_S}+code{_S}+0)?\W*\Z"
    rf"|(?:ok|okay|done|true|success|succeeded|saved|updated|created|written|applied|deleted|removed|acknowledged"
    rf"|accepted)[.!]?{_S}*\Z"
    rf"|[^\n]*\b(?:(?:has|have){_S}+been|was|were|successfully|(?:is|are){_S}+now){_S}+(?:{_ACK_VERBS})\b"
    rf"|[^\n]*\b(?:{_ACK_VERBS}){_S}+successfully\b"
    rf"|(?:the{_S}+)?(?:file|record|entry|item|settings?|config(?:uration)?|key|value|document|page|row)?{_S}*"
    rf"(?:{_ACK_LINE_VERBS})\b[^\n]{{0,160}}\Z"
    r")", re.ASCII)
_JSON_ACK = re.compile(rf'{_S}*\{{{_S}*"(?:ok|success|acknowledged)"{_S}*:{_S}*true{_S}*\}}{_S}*\Z', re.ASCII)
_FIRST_LINE = re.compile(r"[\t\n\f\r ]*([^\n]{0,300})")
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
_PENDING_PHRASE_WORDS = ("ready", "still", "progress", "queued", "waiting for")


def is_failed(text: str) -> bool:
    """The text says it failed (``observation_failed``): an error, a traceback, a refusal, a non-zero return code."""
    lowered = text.translate(_ASCII_LOWER)
    return any(w in lowered for w in _FAILED_WORDS) and _FAILED.search(lowered) is not None


def is_pending(text: str, failed: bool | None = None) -> bool:
    """The text says the work is still in progress (``observation_pending``): a status word (queued, running, in
    progress...) as a status, state or phase or as the whole text; or, on its first line, unless the text says it
    failed, a phrase (not ready, still running, waiting for, in progress, queued, a progress percentage). ``failed``: :func:`is_failed` of
    the text, when the caller has it."""
    if text == "":
        return False
    lowered = text.translate(_ASCII_LOWER)
    if any(w in lowered for w in _PENDING_WORDS) and _PENDING.search(lowered) is not None:
        return True
    if _PENDING_WORD.match(lowered) is not None:
        return True
    line = first_line(lowered)  # a phrase on the first line only: further down, a log is a log, not a status
    if not any(w in line for w in _PENDING_PHRASE_WORDS) or _PENDING_PHRASE.search(line) is None:
        return False
    return not (is_failed(text) if failed is None else failed)


def first_line(text: str) -> str:
    """The first line of a text, leading whitespace (RE2's ``\\s``) skipped, at most 300 characters (code points):
    what :func:`is_ack` reads."""
    match = _FIRST_LINE.match(text)
    return match.group(1) if match is not None else ""


def is_ack(text: str, pending: bool | None = None) -> bool:
    """The text only acknowledges what was done (``observation_ack``): its first line says a file was created, a
    record updated, a command completed with exit code 0 and nothing else, "True"...; or the whole text is
    ``{"ok": true}`` (``success``, ``acknowledged``). Never when that first line says it failed (what follows it may:
    an edit's snippet of code that handles errors), nor when the text says the work is in progress (``pending``:
    :func:`is_pending` of the text, when the caller has it)."""
    line = first_line(text)
    if line == "":
        return False
    lowered = line.translate(_ASCII_LOWER)
    if _ACK.match(lowered) is None and not (line[0] == "{" and _JSON_ACK.match(text.translate(_ASCII_LOWER))):
        return False
    return not is_failed(line) and not (is_pending(text) if pending is None else pending)

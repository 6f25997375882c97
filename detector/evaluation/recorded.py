"""The recorded corpus: agent runs recorded from real frameworks (``recordings/``), replayed through the pipeline.

Each recording is one session as a framework's own OpenTelemetry instrumentation exported it (an OTLP/JSON
``ExportTraceServiceRequest``), labeled in ``recordings/manifest.json`` (``recordings/README.md``). The corpus
(17 MB) lives in the repository, not in the installed package: a server never reads it, so the runtime wheel does
not carry it; :func:`recordings_dir` finds it. The replay
(:func:`detector.evaluation.replay.replay_recorded`) shifts every timestamp so that the session ends about now,
keeping every gap, and posts the spans to the running service's OTLP/HTTP receiver call by call: before the
decision read after the k-th LLM call, every span that had ended by the end of that call (its tool spans of the
previous turn, the call itself), in the order they ended, as the BatchSpanProcessor of a real app exports them.

Pure data and parsing here; no I/O but reading the files.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LLM_OPERATIONS", "RECORDINGS_ENV", "Recording", "is_llm_span", "load_recordings", "recordings_dir"]

RECORDINGS_ENV = "LOOP_DETECTOR_RECORDINGS"
# the repository's recordings/, when this package runs from a checkout (an editable install, or PYTHONPATH=.)
_CHECKOUT_RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_TIME_FIELDS = ("startTimeUnixNano", "endTimeUnixNano")


def recordings_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """Where the recorded corpus is: ``directory`` (``loop-detector eval --recordings DIR``), else
    ``$LOOP_DETECTOR_RECORDINGS``, else the ``recordings/`` folder of the checkout this package runs from, else
    ``./recordings``. A directory is the corpus when it holds a ``manifest.json``; none: ``FileNotFoundError``, with
    where it looked and how to point it elsewhere."""
    if directory:
        candidates = [Path(directory)]
    elif os.environ.get(RECORDINGS_ENV):
        candidates = [Path(os.environ[RECORDINGS_ENV])]
    else:
        candidates = [_CHECKOUT_RECORDINGS, Path.cwd() / "recordings"]
    for candidate in candidates:
        if (candidate / "manifest.json").is_file():
            return candidate
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise FileNotFoundError(f"no recorded corpus (a manifest.json) in {looked}: the corpus is the repository's "
                            f"recordings/ folder, not part of the installed package; run from a checkout, or point "
                            f"to it with --recordings DIR or ${RECORDINGS_ENV}")


def _attrs(span: dict[str, Any]) -> dict[str, str]:
    out = {}
    for kv in span.get("attributes", []):
        value = kv.get("value", {})
        out[kv["key"]] = str(value.get("stringValue", value.get("intValue", "")))
    return out


def is_llm_span(span: dict[str, Any]) -> bool:
    """A model inference span, in any of the dialects the normalization reads (``clickhouse/genai_calls_normalized.sql.tmpl``)."""
    a = _attrs(span)
    op = a.get("gen_ai.operation.name", "")
    if op:
        return op in LLM_OPERATIONS
    return a.get("llm.request.type") in ("chat", "completion") or a.get("openinference.span.kind") == "LLM"


@dataclass
class _Span:
    resource: int  # index into Recording.resources
    scope: int  # index into Recording.scopes
    body: dict[str, Any]
    start: int
    end: int
    llm: bool


@dataclass
class Recording:
    """One recorded session with its labels, and its spans in the order the replay sends them."""

    id: str
    family: str
    label: str  # loop | legit
    onset: int | None
    capture_content: bool
    framework: str
    session_id: str | None
    description: str
    resources: list[dict[str, Any]]
    scopes: list[dict[str, Any]]
    spans: list[_Span] = field(default_factory=list)
    look_alike_of: str = ""

    @property
    def calls(self) -> list[_Span]:
        """The LLM calls, in start order (a decision is read after each)."""
        return sorted((s for s in self.spans if s.llm), key=lambda s: (s.start, s.end))

    @property
    def duration_ns(self) -> int:
        return max(s.end for s in self.spans) - min(s.start for s in self.spans)

    def batches(self) -> list[list[_Span]]:
        """What is sent before the decision read after each LLM call: every span not sent yet that ended before the
        next LLM call started (the call itself, and the tools it ran: the agent checks before its next call), in end
        order; after the last call, what ended by its end. The spans left (the run's own) come with :meth:`rest`."""
        by_end = sorted(self.spans, key=lambda s: (s.end, s.start))
        calls = self.calls
        sent: set[int] = set()
        out = []
        for k, call in enumerate(calls):
            until = calls[k + 1].start if k + 1 < len(calls) else call.end
            batch = [s for s in by_end if id(s) not in sent and (s.end <= max(until, call.end) or s is call)]
            sent.update(id(s) for s in batch)
            out.append(batch)
        self._rest = [s for s in by_end if id(s) not in sent]
        return out

    def rest(self) -> list[_Span]:
        """The spans that end after the last LLM call (the run's own spans), sent at the end."""
        if not hasattr(self, "_rest"):
            self.batches()
        return self._rest

    def request(self, spans: Iterable[_Span], shift_ns: int) -> bytes:
        """An OTLP/JSON ExportTraceServiceRequest of ``spans``, every time moved by ``shift_ns``."""
        grouped: dict[int, dict[int, list[dict[str, Any]]]] = {}
        for s in spans:
            body = copy.deepcopy(s.body)
            for name in _TIME_FIELDS:
                body[name] = str(int(body[name]) + shift_ns)
            for event in body.get("events", []):
                event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift_ns)
            grouped.setdefault(s.resource, {}).setdefault(s.scope, []).append(body)
        resource_spans = [{"resource": self.resources[r], "scopeSpans": [
            {"scope": self.scopes[sc], "spans": bodies} for sc, bodies in scopes.items()]}
            for r, scopes in grouped.items()]
        return json.dumps({"resourceSpans": resource_spans}).encode()


def load_recordings(directory: str | Path | None = None, files: Iterable[str] | None = None) -> list[Recording]:
    """The recordings of a corpus directory (``manifest.json`` + ``otlp/*.json``), sorted by id; ``files``: only
    those (names without ``.json``)."""
    root = recordings_dir(directory)
    manifest = json.loads((root / "manifest.json").read_text())
    wanted = set(files) if files is not None else None
    out = []
    for entry in manifest["recordings"]:
        rid = Path(entry["file"]).stem
        if wanted is not None and rid not in wanted:
            continue
        document = json.loads((root / entry["file"]).read_text())
        rec = Recording(
            id=rid, family=entry["family"], label=entry["label"], onset=entry.get("onset"),
            capture_content=entry.get("content") == "on", framework=entry.get("framework", ""),
            session_id=entry.get("session_id"), description=entry.get("description", ""), resources=[], scopes=[],
            look_alike_of=entry.get("look_alike_of", ""),
        )
        for rs in document.get("resourceSpans", []):
            rec.resources.append(rs.get("resource", {}))
            for ss in rs.get("scopeSpans", []):
                rec.scopes.append(ss.get("scope", {}))
                for span in ss.get("spans", []):
                    rec.spans.append(_Span(len(rec.resources) - 1, len(rec.scopes) - 1, span,
                                           int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"]),
                                           is_llm_span(span)))
        llm_calls = len(rec.calls)
        if rec.label == "loop" and (rec.onset is None or not 0 <= rec.onset < llm_calls):
            raise ValueError(f"{rid}: onset {rec.onset!r} is not one of its {llm_calls} LLM calls")
        out.append(rec)
    if not out:
        raise ValueError(f"no recordings in {root}")
    return sorted(out, key=lambda r: r.id)

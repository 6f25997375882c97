"""Prometheus metrics (``GET /metrics``), one registry per service.

The spec's gateway metrics under our ``loop_`` prefix, plus ingest and detector health:

* ``loop_confidence_score`` histogram per virtual_key (buckets 0.1 ... 1.0), one observation per scored call;
* ``loop_enforcement_total{level, virtual_key}`` enforcement level transitions;
* ``loop_metric_keys_folded_total``: how often a key was counted under ``virtual_key="other"`` (once per key and cycle).

The ``virtual_key`` label is bounded (:class:`KeyLabels`): keys with an override block in the config, plus the first
``metrics.max_key_labels`` (default 0) keys seen, have their own value; every other key is ``other``. Keys come from
spans, so one label set per key grew without bound (50,000 keys: a 117 MB scrape, +918 MB of memory).
* ``loop_sessions_active`` / ``loop_sessions_evicted_total``;
* ``loop_ingest_spans_total{result}`` accepted / rejected spans;
* ``loop_detector_cycle_seconds`` histogram, ``loop_detector_watermark_lag_seconds``, ``loop_detector_calls_scored_total``;
* ``loop_detector_decisions_stale_seconds``: the age of the decisions ``/v1/check`` serves (its ``stale_seconds``),
  and ``loop_detector_cycle_failures_total`` / ``loop_detector_cycles_failing`` (failed cycles; the current run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from detector.settings.vocabulary import EVENT_ESCALATION, EVENT_RULE, SCOPE_SESSION

if TYPE_CHECKING:
    from detector.core.engine import CycleOutput
    from detector.detection.freshness import Freshness
    from detector.detection.job import CycleStats, DetectorJob

__all__ = ["CONFIDENCE_BUCKETS", "KeyLabels", "Metrics", "OTHER_KEYS"]

OTHER_KEYS = "other"


class KeyLabels:
    """The ``virtual_key`` label value of a key: its own for configured keys and the first ``max_dynamic()`` keys
    seen (kept for the process's life, so every series stays monotonic), else :data:`OTHER_KEYS`. The empty key
    (calls without one) keeps ``""``."""

    def __init__(self, configured: Callable[[], Collection[str]], max_dynamic: Callable[[], int]) -> None:
        self.configured = configured
        self.max_dynamic = max_dynamic
        self._admitted: set[str] = set()
        self._lock = threading.Lock()
        self.folded = 0

    def __call__(self, key: str) -> str:
        if not key or key in self._admitted or key in self.configured():
            return key
        with self._lock:
            if len(self._admitted) < self.max_dynamic():
                self._admitted.add(key)
                return key
            self.folded += 1
        return OTHER_KEYS

CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class _LiveCollector(Collector):
    """Gauges and counters read at scrape time from the live objects."""

    def __init__(self, job: DetectorJob, ingest_counts: Callable[[], tuple[int, int]], key_labels: KeyLabels,
                 freshness: Freshness | None) -> None:
        self.job = job
        self.freshness = freshness
        self.ingest_counts = ingest_counts
        self.key_labels = key_labels

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("loop_sessions_active", "Sessions currently tracked by the detector",
                                value=self.job.active_sessions())
        evicted = CounterMetricFamily("loop_sessions_evicted", "Sessions removed by expiry or LRU eviction")
        evicted.add_metric([], self.job.evicted_total)
        yield evicted
        accepted, rejected = self.ingest_counts()
        spans = CounterMetricFamily("loop_ingest_spans", "OTLP spans received", labels=["result"])
        spans.add_metric(["accepted"], accepted)
        spans.add_metric(["rejected"], rejected)
        yield spans
        yield GaugeMetricFamily("loop_detector_watermark_lag_seconds",
                                "Age of the newest call when the detector last read it",
                                value=self.job.last_stats.lag_seconds)
        folded = CounterMetricFamily("loop_metric_keys_folded", "Keys counted as virtual_key=other, once per key and cycle")
        folded.add_metric([], self.key_labels.folded)
        yield folded
        yield GaugeMetricFamily("loop_detector_watermark_us", "The detector's watermark (unix microseconds)",
                                value=self.job.watermark_us)
        if self.freshness is not None:
            fresh = self.freshness.view()
            yield GaugeMetricFamily("loop_detector_decisions_stale_seconds", "Seconds since the start of the last "
                                    "detection cycle that succeeded: the age of the decisions /v1/check serves",
                                    value=fresh.stale_seconds)
            yield GaugeMetricFamily("loop_detector_cycles_failing", "Consecutive failed detection cycles (0: current)",
                                    value=fresh.failing_cycles)
            failures = CounterMetricFamily("loop_detector_cycle_failures", "Detection cycles that failed")
            failures.add_metric([], self.freshness.failures_total)
            yield failures


class Metrics:
    def __init__(self, job: DetectorJob, ingest_counts: Callable[[], tuple[int, int]],
                 key_labels: KeyLabels | None = None, freshness: Freshness | None = None) -> None:
        self.key_labels = key_labels if key_labels is not None else KeyLabels(lambda: (), lambda: 0)
        self.registry = CollectorRegistry()
        self.confidence = Histogram("loop_confidence_score", "Per-call session confidence", ["virtual_key"],
                                    buckets=CONFIDENCE_BUCKETS, registry=self.registry)
        self.enforcement = Counter("loop_enforcement", "Enforcement level transitions", ["level", "virtual_key"],
                                   registry=self.registry)
        self.cycle_seconds = Histogram("loop_detector_cycle_seconds", "Duration of one detection cycle",
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                       registry=self.registry)
        self.calls_scored = Counter("loop_detector_calls_scored", "LLM calls scored", registry=self.registry)
        self.rule_trips = Counter("loop_rule_trips", "Rule detector trips", ["detector", "action", "mode"],
                                  registry=self.registry)
        self.registry.register(_LiveCollector(job, ingest_counts, self.key_labels, freshness))

    def observe_cycle(self, out: CycleOutput, stats: CycleStats) -> None:
        self.cycle_seconds.observe(stats.seconds)
        self.calls_scored.inc(out.calls_scored)
        histograms = {}  # the labelled child of each key, looked up once per cycle rather than per row
        scores = out.scores
        label = self.key_labels
        for scope, virtual_key, confidence in zip(scores.scope, scores.virtual_key, scores.confidence, strict=True):
            if scope == SCOPE_SESSION:
                histogram = histograms.get(virtual_key)
                if histogram is None:
                    histogram = histograms[virtual_key] = self.confidence.labels(virtual_key=label(virtual_key))
                histogram.observe(confidence)
        for event in out.events:
            if event["kind"] == EVENT_ESCALATION:
                self.enforcement.labels(level=event["to_level"], virtual_key=label(event["virtual_key"])).inc()
            elif event["kind"] == EVENT_RULE:
                self.rule_trips.labels(detector=event["detector"], action=event["action"], mode=event["mode"]).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""The admission control's figures on ``/metrics`` (:mod:`detector.ingest.admission`), read at scrape time:

* ``loop_ingest_refused_total{reason}``: OTLP requests refused for overload (memory, commit_wait, detector_behind),
  both receivers together;
* ``loop_ingest_inflight_bytes``, ``loop_ingest_inflight_peak_bytes``, ``loop_ingest_inflight_limit_bytes``: the bytes
  of the requests in flight (bodies read, decoded rows) now, at their highest since the start, and the bound;
* ``loop_ingest_inflight_requests``, ``loop_ingest_commit_wait_seconds``, ``loop_ingest_detector_behind_seconds``,
  ``loop_ingest_event_loop_delay_seconds``: the figures the other bounds apply to.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from detector.ingest.admission import Admission

__all__ = ["AdmissionMetrics"]


class AdmissionMetrics(Collector):
    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def collect(self) -> Iterator[Metric]:
        figures = self.admission.snapshot()
        refused = CounterMetricFamily("loop_ingest_refused", "OTLP requests refused for overload (retryable)",
                                      labels=["reason"])
        for reason, count in figures.refused.items():
            refused.add_metric([reason], count)
        yield refused
        yield GaugeMetricFamily("loop_ingest_inflight_bytes", "Bytes of OTLP requests in flight (bodies read, decoded "
                                "rows)", value=figures.inflight_bytes)
        yield GaugeMetricFamily("loop_ingest_inflight_peak_bytes", "Highest loop_ingest_inflight_bytes since the start",
                                value=figures.peak_bytes)
        yield GaugeMetricFamily("loop_ingest_inflight_limit_bytes", "ingest.max_inflight_bytes",
                                value=figures.max_inflight_bytes)
        yield GaugeMetricFamily("loop_ingest_inflight_requests", "OTLP requests admitted and not answered yet",
                                value=figures.inflight_requests)
        yield GaugeMetricFamily("loop_ingest_commit_wait_seconds", "How long the oldest decoded request has waited "
                                "for its commit", value=figures.commit_wait_seconds)
        yield GaugeMetricFamily("loop_ingest_event_loop_delay_seconds", "How late the event loop (shared with the "
                                "API) runs a timer: decaying maximum", value=figures.loop_delay_seconds)
        yield GaugeMetricFamily("loop_ingest_detector_behind_seconds", "How long ago the oldest acknowledged commit "
                                "the detector has not read was acknowledged", value=figures.detector_behind_seconds)

"""Prometheus label sets stay bounded whatever keys the spans carry (issue 16, failure 4: every virtual_key seen
in OTLP became a label set; 50,000 keys made a 117 MB /metrics). Real spans with 1,500 distinct keys through the
receiver and the detector; the scrape then has one series set per configured key plus ``other``, and nothing is
lost: the per-call histogram still counts every scored call. (bench/reliability.py runs the 50,000-key probe.)
"""

from __future__ import annotations

import re
import time

import httpx
from support.enforcement import make_config
from support.otlp_senders import chat_spans, encode, new_conversation, post_body

from detector.service.process import running_service

KEYS = 1_500


def label_values(text: str, metric: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for match in re.finditer(rf'^{metric}\{{virtual_key="([^"]*)"\}} (\S+)$', text, re.M):
        out[match.group(1)] = float(match.group(2))
    return out


def test_metric_label_sets_are_bounded_by_the_config(tmp_path):
    config = make_config(virtual_keys={"vk-known": {}}, metrics={"max_key_labels": 2})
    with running_service(config, tmp_path) as (service, eps):
        with httpx.Client(base_url=eps.otlp, timeout=60) as client:
            for start in range(0, KEYS, 500):
                keys = {i: {"loop_detector.virtual_key": f"vk-{start + i}"} for i in range(500)}
                spans = chat_spans(500, new_conversation(), attributes=keys)
                assert post_body(client, encode(spans)).status_code == 200
            known = chat_spans(3, new_conversation(), virtual_key="vk-known")
            assert post_body(client, encode(known)).status_code == 200
        deadline = service.job.cycles + 300
        while _scored(eps.api) < KEYS + 3:
            assert service.job.cycles < deadline, "the calls were not scored"
            time.sleep(0.05)
        text = httpx.get(eps.api + "/metrics").text
    counts = label_values(text, "loop_confidence_score_count")
    dynamic = set(counts) - {"vk-known", "other"}
    assert "vk-known" in counts and "other" in counts  # the configured key, and every key beyond the first two
    assert len(dynamic) == 2 and dynamic <= {f"vk-{i}" for i in range(KEYS)}
    assert sum(counts.values()) == KEYS + 3 and counts["vk-known"] == 3
    assert len(text) < 20_000  # a handful of series, not one set per key


def _scored(api: str) -> float:
    match = re.search(r"^loop_detector_calls_scored_total (\S+)$", httpx.get(api + "/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0

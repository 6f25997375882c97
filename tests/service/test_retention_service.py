"""The service applies retention at start and when its config changes (reload or the admin API)."""

from __future__ import annotations

from detector.service.process import Service
from detector.settings.config import parse_config
from detector.storage.retention import current_ttl


def ttl_of(service: Service, table: str) -> str | None:
    row = service.store.rows("SELECT engine_full FROM system.tables WHERE database = 'otel' AND name = {t:String}",
                             {"t": table})[0]
    return current_ttl(row["engine_full"])


def test_retention_at_start_and_on_config_change(tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text("retention: {spans: 2d}\n")
    service = Service(parse_config({"retention": {"spans": "2d"}}), tmp_path / "data", config_path=str(config_path))
    try:
        assert ttl_of(service, "otel_traces") == "toDateTime(Timestamp) + toIntervalDay(2)"
        assert ttl_of(service, "loop_events") == "toDateTime(inserted_at) + toIntervalDay(30)"
        config_path.write_text("retention: {spans: 12h, detector: off}\n")
        assert service.reload() == []
        assert ttl_of(service, "otel_traces") == "toDateTime(Timestamp) + toIntervalHour(12)"
        assert ttl_of(service, "otel_traces_trace_id_ts") == "toDateTime(Start) + toIntervalHour(12)"
        assert ttl_of(service, "loop_events") is None
    finally:
        service.close()

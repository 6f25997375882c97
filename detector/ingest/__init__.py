"""Ingest: the embedded OTLP/HTTP trace receiver (``receiver``) and its decoder (``otlp``).

Spans are written into ``otel.otel_traces`` exactly as the OpenTelemetry Collector's contrib
ClickHouse exporter writes them, so the staging view that feeds ``otel.genai_spans`` (and through the
detection cycle ``otel.genai_calls``) sees the same rows whichever ingest path (this receiver or a collector)
delivered them.
"""

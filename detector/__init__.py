"""loop-detector: catch AI agents stuck in loops from their OpenTelemetry GenAI spans, and stop them.

The public surfaces are the CLI (``loop-detector``), the HTTP API and the SDK (:mod:`detector.sdk`).
"""

__version__ = "0.1.0"

"""loop-detector: catch AI agents stuck in loops from their OpenTelemetry GenAI spans, and stop them.

The public surfaces are the CLI (``loop-detector``), the HTTP API and the SDK (:mod:`detector.sdk`).
"""

from detector import native

__version__ = "0.1.0"

native.install()  # before any core module loads: compiled, or the Python source (see detector.native)

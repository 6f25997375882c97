"""The framework corpus: agent runs recorded from real frameworks and their own OpenTelemetry instrumentation.

``manifest.json`` lists every recording (``otlp/*.json``, OTLP/JSON ExportTraceServiceRequest) with its label,
onset, session and trace ids; ``record.py`` re-records them in a separate virtualenv (see README.md). The recorder
modules import the frameworks, so nothing here imports them: only the data paths are exposed.
"""

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
MANIFEST = DIRECTORY / "manifest.json"

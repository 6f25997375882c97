"""``detector.sdk``: the Python SDK, re-exported from its own distribution, :mod:`loop_detector_sdk`
(``sdk/python/``; httpx only, installable without the server: ``pip install ./sdk/python``).

The server's distribution carries the same package, so ``from detector.sdk import LoopGuard`` keeps working
and names the very same objects as ``from loop_detector_sdk import LoopGuard``. The core submodules are
aliased too (``detector.sdk.client`` is ``loop_detector_sdk.client``); the names that need an optional
library (the span processor, the framework guards) load on first use, as in the SDK itself.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import loop_detector_sdk

__all__ = list(loop_detector_sdk.__all__)
for _name in __all__:
    if _name not in loop_detector_sdk.LAZY:
        globals()[_name] = getattr(loop_detector_sdk, _name)
for _module in ("anthropic_wrap", "blocklist", "client", "context", "fingerprint", "models", "openai_wrap"):
    sys.modules[f"{__name__}.{_module}"] = importlib.import_module(f"loop_detector_sdk.{_module}")


def __getattr__(name: str) -> Any:  # the lazy names (LoopAttributesSpanProcessor, the framework guards)
    return getattr(loop_detector_sdk, name)

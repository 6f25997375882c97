"""``detector.sdk``: the Python SDK, re-exported from its own distribution, :mod:`loop_detector_sdk`
(``sdk/python/``; httpx only, installable without the server: ``pip install ./sdk/python``).

The server's distribution carries the same package, so ``from detector.sdk import LoopGuard`` keeps working
and names the very same objects as ``from loop_detector_sdk import LoopGuard``. Submodules are the SDK's too:
``import detector.sdk.otel`` gives the module ``loop_detector_sdk.otel`` (an import hook maps the names, so
that the optional ones, which need OpenTelemetry or a framework, still load only when asked for).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

import loop_detector_sdk

__all__ = list(loop_detector_sdk.__all__)
for _name in __all__:
    if _name not in loop_detector_sdk.LAZY:
        globals()[_name] = getattr(loop_detector_sdk, _name)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``detector.sdk.X`` as the already-importable ``loop_detector_sdk.X`` (one module, two names)."""

    prefix = __name__ + "."

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefix):
            return None
        if importlib.util.find_spec("loop_detector_sdk." + fullname[len(self.prefix):]) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module("loop_detector_sdk." + spec.name[len(self.prefix):])

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed, under its own name


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.append(_Alias())


def __getattr__(name: str) -> Any:  # the lazy names (LoopAttributesSpanProcessor, the framework guards)
    return getattr(loop_detector_sdk, name)

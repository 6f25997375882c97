"""The base of every configuration section: an unknown key is an error (a typo must not be silently ignored)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

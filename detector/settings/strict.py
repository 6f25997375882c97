"""The base of every configuration section: an unknown key is an error (a typo must not be silently ignored), and a
key that was removed is an error that says so (rather than "extra inputs are not permitted")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidatorFunctionWrapHandler, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    # Keys a section no longer has: name -> why, said to whoever still sets one (every other error listed beside it).
    removed_settings: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _no_removed_settings(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        removed = cls.removed_settings
        if not removed or not isinstance(data, dict) or removed.keys().isdisjoint(data):
            return handler(data)
        errors: list[InitErrorDetails] = [
            {"type": PydanticCustomError("removed_setting", "{why}", {"why": removed[key]}), "loc": (key,),
             "input": value}
            for key, value in data.items() if key in removed]
        try:
            handler({key: value for key, value in data.items() if key not in removed})
        except ValidationError as exc:  # the other errors, as they read (whatever their type: custom ones too)
            errors.extend({"type": PydanticCustomError(e["type"], e["msg"]), "loc": e["loc"], "input": e["input"]}
                          for e in exc.errors())
        raise ValidationError.from_exception_data(cls.__name__, errors)

"""What a store failure says: about the data (a value the store refuses) or about the store (down, full, timed out).

The distinction decides a sender's answer. A failure that names the data is narrowed down to the spans the store
refuses, which are rejected alone (partial success); any other failure leaves the whole request unacknowledged
(retryable), since retrying it later may succeed. Error messages may quote row data, so only the exception's type
and ClickHouse error code ever leave this module (:func:`safe_error`).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["DATA_ERROR_CODES", "StoreDown", "error_code", "is_data_error", "safe_error"]

# ClickHouse error codes that say "this data", not "this store": parse and conversion failures, values out of
# range, a function refusing its argument (throwIf included). Any other failure is taken as the store's.
DATA_ERROR_CODES: Final = frozenset({
    6,  # CANNOT_PARSE_TEXT
    26,  # CANNOT_PARSE_QUOTED_STRING
    27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    36,  # BAD_ARGUMENTS
    38,  # CANNOT_PARSE_DATE
    41,  # CANNOT_PARSE_DATETIME
    43,  # ILLEGAL_TYPE_OF_ARGUMENT
    44,  # ILLEGAL_COLUMN
    53,  # TYPE_MISMATCH
    69,  # ARGUMENT_OUT_OF_BOUND
    70,  # CANNOT_CONVERT_TYPE
    72,  # CANNOT_PARSE_NUMBER
    117,  # INCORRECT_DATA
    128,  # TOO_LARGE_ARRAY_SIZE
    131,  # TOO_LARGE_STRING_SIZE
    190,  # SIZES_OF_ARRAYS_DONT_MATCH
    306,  # TOO_DEEP_RECURSION
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
    407,  # DECIMAL_OVERFLOW
})

_CODE: Final = re.compile(r"Code: (\d+)")


def error_code(exc: BaseException) -> int | None:
    """The ClickHouse error code an exception's message carries, if any."""
    match = _CODE.search(str(exc))
    return int(match.group(1)) if match else None


def is_data_error(exc: BaseException) -> bool:
    return error_code(exc) in DATA_ERROR_CODES


def safe_error(exc: BaseException) -> str:
    """An exception as type and ClickHouse error code only: messages may quote row data."""
    code = error_code(exc)
    return f"{type(exc).__name__}{f' (ClickHouse code {code})' if code is not None else ''}"


class StoreDown(Exception):
    """The store failed for a reason other than the data: what was being committed stays pending."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(safe_error(cause))
        self.cause = cause

"""A table that refuses every insert as a full disk does, for real: ``min_free_disk_bytes_to_perform_insert`` above
any disk's free space makes ClickHouse answer each insert into that table with NOT_ENOUGH_SPACE (code 243), the very
error of a full disk, for that table alone, from the moment a test chooses until it gives the space back."""

from __future__ import annotations

from typing import Any

__all__ = ["NEVER_ENOUGH", "refuse_inserts"]

NEVER_ENOUGH = 2**62  # more free bytes than any disk has: every insert into the table is refused
_REFUSE = "ALTER TABLE {table} MODIFY SETTING min_free_disk_bytes_to_perform_insert = {{n:UInt64}}"


def refuse_inserts(store: Any, table: str, refused: bool = True) -> None:
    """``table`` (one of the schema's, a name of ours) refuses every insert from now on, or, with ``refused=False``,
    takes them again (space is back)."""
    store.command(_REFUSE.format(table=table), {"n": NEVER_ENOUGH if refused else 0})

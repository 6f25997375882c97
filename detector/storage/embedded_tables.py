"""Table settings for the embedded store (chDB), so that a burst of load leaves no threads behind.

ClickHouse removes a table's outdated parts (those merged away) in parallel when there are more than
``concurrent_part_removal_threshold`` (100) of them, on a pool of up to 128 threads taken from the process's global
thread pool, and the global pool then keeps up to 1,000 idle threads (``max_thread_pool_free_size``). A server is
sized for that; an embedded service is one process beside its agents: after a minute of 1,000 spans/s, the clean-up of
the merged parts took the service from 36 threads to 165, and they stayed, idle, for good. chDB's global pool is
created when ``chdb`` is imported (it runs a query then), before a session could pass it another size, so the bound is
set where the parallelism is decided: per table, parts are removed one after the other (a few milliseconds each, in
the background), and the pool never grows for it.

Applied after the schema, to every MergeTree table of database ``otel`` (``ALTER TABLE ... MODIFY SETTING``, a metadata
change), on the embedded store only: a ClickHouse server keeps its own settings.
"""

from __future__ import annotations

from detector.storage.transport import Store

__all__ = ["PART_REMOVAL_SETTING", "apply_embedded_table_settings"]

# Outdated parts are removed in parallel only past this many: beyond any count a table reaches, so never. (As
# system.tables shows it in create_table_query, which is how a table already set is recognised.)
PART_REMOVAL_SETTING = "concurrent_part_removal_threshold = 1000000000"
ALTER_SETTING = f"ALTER TABLE otel.{{table:Identifier}} MODIFY SETTING {PART_REMOVAL_SETTING}"

SELECT_MERGE_TREES = """
SELECT name FROM system.tables WHERE database = 'otel' AND engine LIKE '%MergeTree' ORDER BY name
"""
SELECT_TABLE_SETTING = """
SELECT count() AS n FROM system.tables
WHERE database = 'otel' AND name = {table:String} AND position(create_table_query, {setting:String}) > 0
"""


def apply_embedded_table_settings(store: Store) -> list[str]:
    """Set :data:`PART_REMOVAL_SETTING` on every MergeTree table of ``otel`` that does not have it yet; returns the
    tables changed (a restart with every table set changes none)."""
    changed = []
    for row in store.rows(SELECT_MERGE_TREES):
        table = str(row["name"])
        if store.rows(SELECT_TABLE_SETTING, {"table": table, "setting": PART_REMOVAL_SETTING})[0]["n"]:
            continue
        store.command(ALTER_SETTING, {"table": table})
        changed.append(table)
    return changed

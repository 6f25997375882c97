"""Budget spend totals in the store: persisted with each checkpoint, restored at start, seeded once.

The totals themselves are kept by :class:`detector.core.budgets.BudgetTracker` (pure); this module is
their I/O: ``otel.loop_meta`` rows under ``budget:<shard>:``, and on the very first start (nothing
persisted yet) a windowed aggregate of the current UTC month of calls.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from detector.core.budgets import META_PREFIX, BudgetTracker, period_key
from detector.core.models import Call
from detector.core.pricing import PriceBook
from detector.settings.config import AppConfig
from detector.settings.vocabulary import SCOPE_FEATURE, SCOPE_KEY, SCOPE_SESSION
from detector.storage.transport import Store, insert_rows

__all__ = ["load_totals", "save_totals"]

log = logging.getLogger("loop_detector.budgets")

SELECT_SNAPSHOT = """
SELECT key, value FROM otel.loop_meta FINAL WHERE startsWith(key, {prefix:String})
"""

# The first-start seed: the current UTC month of LLM calls already in the store, up to the detector's
# watermark (calls after it are replayed through the engine, which accounts them).
SELECT_MONTH_SPEND = """
SELECT feature, session_id, virtual_key, model, toString(toDate(ts)) AS day,
       sumIf(cost_usd, cost_usd > 0) AS cost, sumIf(input_tokens, cost_usd = 0) AS input_tokens,
       sumIf(output_tokens, cost_usd = 0) AS output_tokens
FROM otel.genai_calls
WHERE ts >= toStartOfMonth(now64(9, 'UTC')) AND operation IN ('chat', 'text_completion', 'generate_content')
  AND inserted_at <= fromUnixTimestamp64Micro({watermark:Int64})
  AND cityHash64(session_id) % {shards:UInt32} = {shard:UInt32}
GROUP BY feature, session_id, virtual_key, model, day
"""


def load_totals(store: Store, tracker: BudgetTracker, config: AppConfig, shard_key: str, watermark_us: int) -> int:
    """Restore the persisted totals; on the very first start (none persisted) seed them from the month's calls."""
    rows = store.rows(SELECT_SNAPSHOT, {"prefix": f"{META_PREFIX}{shard_key}:"})
    if rows:
        return tracker.restore(rows, shard_key)
    if watermark_us <= 0:
        return 0
    index, count = config.detector.shard_index, config.detector.shard_count
    totals: dict[tuple[str, str, str], float] = defaultdict(float)
    month = period_key("month", int(time.time() * 1e6))
    prices = PriceBook({model: (p.input_per_million, p.output_per_million) for model, p in config.prices.items()})
    for r in store.rows(SELECT_MONTH_SPEND, {"watermark": watermark_us, "shards": count, "shard": index}):
        priced = Call(ts_ns=0, trace_id="", span_id="", session_id="", model=r["model"],
                      input_tokens=int(r["input_tokens"]), output_tokens=int(r["output_tokens"]))
        usd = float(r["cost"]) + prices.cost(priced)
        if usd <= 0:
            continue
        day = "d:" + r["day"]
        for scope, scope_id in ((SCOPE_FEATURE, r["feature"]), (SCOPE_SESSION, r["session_id"]), (SCOPE_KEY, r["virtual_key"])):
            if scope_id:
                for pk in ("run", day, month):
                    totals[(scope, scope_id, pk)] += usd
    tracker.add_totals(totals)
    log.info("budget totals seeded from the current month", extra={"scopes": len({k[:2] for k in totals})})
    return len(totals)


def save_totals(store: Store, tracker: BudgetTracker, shard_key: str, version: int) -> int:
    return insert_rows(store, "otel.loop_meta", tracker.snapshot_rows(shard_key, version))

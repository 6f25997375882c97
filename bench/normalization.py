"""The normalization statement's cost (``clickhouse/genai_calls_normalized.sql.tmpl``): the working tree's template
beside another revision's, over the same staged spans, in one process.

    .venv/bin/python bench/normalization.py [--spans N] [--repeat R] [--baseline REV]

1. Stages N GenAI spans once (the ingest bench's workload, ``bench/ingest.py``, with its tool spans carrying results
   as with content capture on: file text, acknowledgements, statuses, errors, empty results), decoded as the receiver
   decodes them and inserted into ``otel.otel_traces`` (the staging view copies them into ``otel.genai_spans``).
2. Runs the detection cycle's transform over them (``INSERT INTO otel.genai_calls ... SELECT`` from the template,
   ``detector/storage/normalization.py``) R times with each template, alternating, the table emptied before each run;
   each run's wall time and CPU time (this process: chDB's threads included).
3. Prints the median of each and the ratio (working tree / baseline). The baseline's statement writes the columns its
   template gives (a column it does not have keeps the table's default).

The machine may be shared: the ratio of one run, alternating, is the figure to compare; absolute times vary.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import build_bodies, decode_all  # noqa: E402

from detector.storage.normalization import (  # noqa: E402
    _RANGE,
    _SETTINGS,
    _WRITTEN,
    CALLS_TABLE,
    NORMALIZATION_FILE,
    SELECT_CALL_TABLE_COLUMNS,
    SELECT_NOW_US,
)
from detector.storage.schema import apply_schema  # noqa: E402
from detector.storage.transport import ChdbStore  # noqa: E402


def template_at(revision: str) -> str:
    """The template as ``revision`` holds it (``git show``)."""
    out = subprocess.run(["git", "show", f"{revision}:clickhouse/{NORMALIZATION_FILE}"], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def statement(store: ChdbStore, template: str) -> str:
    """The transform's statement (``transform_statement``) over ``template``: the table's columns that it gives."""
    given = {r["name"] for r in store.rows(f"DESCRIBE TABLE (\n{template}\n)", {
        "watermark": 0, "cutoff": 0, "shards": 1, "shard": 0, "own_shard": 1})}
    names = ", ".join(f"`{r['name']}`" for r in store.rows(SELECT_CALL_TABLE_COLUMNS) if r["name"] in given)
    return (f"INSERT INTO {CALLS_TABLE} ({names}) SELECT {names} FROM (\n{template}\n) "
            f"WHERE (trace_id, span_id, inserted_at) NOT IN ({_WRITTEN}) SETTINGS {_SETTINGS}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=20_000, help="GenAI spans to stage (default 20000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each template (default 5)")
    parser.add_argument("--baseline", default="HEAD", help="the revision whose template is the baseline (default HEAD)")
    args = parser.parse_args()

    templates = {"baseline": template_at(args.baseline),
                 "working tree": (ROOT / "clickhouse" / NORMALIZATION_FILE).read_text().strip()}
    with tempfile.TemporaryDirectory() as tmp:
        store = ChdbStore(tmp)
        apply_schema(store)
        now_ns = time.time_ns()
        _, tables, spans = decode_all(build_bodies(args.spans, 1000, now_ns=now_ns, tool_results=True), now_ns)
        for table in tables:
            store.insert_arrow("otel.otel_traces", table)
        cutoff = int(store.rows(SELECT_NOW_US)[0]["now_us"])
        params = {"watermark": 0, "cutoff": cutoff, "shards": 1, "shard": 0, "own_shard": 1}
        statements = {name: statement(store, t) for name, t in templates.items()}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in templates}
        for i in range(args.repeat + 1):  # the first round warms up, and is not counted
            for name, sql in statements.items():
                store.command(f"TRUNCATE TABLE {CALLS_TABLE}")
                wall, cpu = time.perf_counter(), time.process_time()
                store.command(sql, params)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                calls = store.rows(f"SELECT count() AS n FROM {CALLS_TABLE} WHERE {_RANGE}", params)[0]["n"]
                if i:
                    times[name].append((wall, cpu))
        store.close()
    print(f"{spans:,} spans staged, {calls:,} calls written per run; median of {args.repeat} alternating runs "
          f"(baseline: {args.baseline})")
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"  {name:13} wall {wall * 1000:8.1f} ms  cpu {cpu * 1000:8.1f} ms  ({spans / wall:,.0f} spans/s)")
    b, w = med["baseline"], med["working tree"]
    print(f"  ratio (working tree / baseline): wall {w[0] / b[0]:.2f}, cpu {w[1] / b[1]:.2f}")


if __name__ == "__main__":
    main()

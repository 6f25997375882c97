"""The embedded store's tables remove outdated parts one by one (``detector/storage/embedded_tables.py``): the
clean-up after a burst of inserts no longer leaves a hundred idle engine threads in the process for good.

The scenario runs in a fresh child process (the engine's thread pool is process-wide and never shrinks, so a pytest
process that ran other chDB tests says nothing): the real schema, 200 inserts into one table with its merges stopped,
then merged into one part, and the 200 outdated parts cleaned up. Without the setting the clean-up takes the process
from 25 threads to 150; with it, none more. The table's clean-up is made prompt for the test (``old_parts_lifetime``,
``cleanup_delay_period``: table settings of this test's store only), so the test waits a second, not minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from detector.storage.embedded_tables import apply_embedded_table_settings
from detector.storage.transport import ChdbStore

INSERTS = 200  # parts: past ClickHouse's threshold (100) for removing them on its pool of 128 threads
EXTRA_THREADS = 20  # what the clean-up may add (the bug: ~130)

SCENARIO = textwrap.dedent("""
    import json, re, sys, tempfile, time
    from pathlib import Path
    from detector.storage.embedded_tables import apply_embedded_table_settings
    from detector.storage.schema import apply_schema
    from detector.storage.transport import ChdbStore

    def threads():
        return int(re.search(r"^Threads:\\s+(\\d+)", Path("/proc/self/status").read_text(), re.M).group(1))

    store = ChdbStore(tempfile.mkdtemp())
    apply_schema(store)
    if sys.argv[1] == "bounded":
        apply_embedded_table_settings(store)
    store.command("ALTER TABLE otel.loop_meta MODIFY SETTING old_parts_lifetime = 1, cleanup_delay_period = 1, "
                  "cleanup_delay_period_random_add = 0, cleanup_thread_preferred_points_per_iteration = 0")
    store.command("DETACH TABLE otel.loop_meta")  # its clean-up task restarts on the settings above
    store.command("ATTACH TABLE otel.loop_meta")
    before = threads()
    store.command("SYSTEM STOP MERGES otel.loop_meta")  # the parts accumulate, then become outdated at once
    for i in range(int(sys.argv[2])):
        store.command("INSERT INTO otel.loop_meta (key, value, version) VALUES ({k:String}, 'v', {i:UInt64})",
                      {"k": f"k{i}", "i": i})
    store.command("SYSTEM START MERGES otel.loop_meta")
    store.command("OPTIMIZE TABLE otel.loop_meta FINAL")
    parts = "SELECT count() AS n FROM system.parts WHERE database = 'otel' AND table = 'loop_meta' AND NOT active"
    outdated = store.rows(parts)[0]["n"]
    deadline = time.monotonic() + 60
    while store.rows(parts)[0]["n"] and time.monotonic() < deadline:
        time.sleep(0.2)
    print(json.dumps({"before": before, "after": threads(), "outdated": outdated, "left": store.rows(parts)[0]["n"]}))
""")


def clean_up(mode: str) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-c", SCENARIO, mode, str(INSERTS)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_burst_of_outdated_parts_is_cleaned_up_without_a_burst_of_threads():
    seen = clean_up("bounded")
    assert seen["outdated"] >= INSERTS and seen["left"] == 0, seen  # the clean-up ran, over all of them
    assert seen["after"] <= seen["before"] + EXTRA_THREADS, seen


def test_every_merge_tree_table_gets_the_setting_once(tmp_path):
    from detector.storage.schema import apply_schema

    store = ChdbStore(tmp_path)
    try:
        apply_schema(store)
        changed = apply_embedded_table_settings(store)
        assert {"otel_traces", "genai_spans", "genai_calls", "loop_meta", "loop_scores"} <= set(changed)
        assert apply_embedded_table_settings(store) == []  # a restart changes nothing
    finally:
        store.close()

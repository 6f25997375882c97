"""Detection results are unchanged by the move of normalization from insert time to the detection cycle (issue 26).

Both corpora of the repository (the generated one: the 248 runs of the 31 families it had when the golden file was
written, ``GOLDEN_FAMILIES``; the recorded one: 96 sessions of real frameworks), under both configurations (the
defaults, ``preset: protect``), go through the pipeline deterministically
(``tests/support/golden_pipeline.py``: fixed ids and times, one insert and one detection cycle per round). What the
normalization made of every span (a digest of each ``otel.genai_calls`` row) and the decision read after every call
must equal ``tests/data/golden_pipeline.json.gz``, which the same script wrote first on 6a852c8, the last commit that
normalized spans on insert with a materialized view, and again on 4e20fbf, where detection changed on purpose (issue
31: outcomes; every call digest gained the acknowledgement column; the decisions' differences reviewed in its closing
note). The file records the command, ``produced_by``.

When detection changes on purpose (``detector/core``), the decisions change with it: regenerate the file on the
change's parent, and review the difference. The ``calls`` part changes only when what a fingerprint means changes.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden_pipeline.json.gz"
SCRIPT = ROOT / "tests" / "support" / "golden_pipeline.py"


def differing(expected: dict[str, list], got: dict[str, list], limit: int = 5) -> list[str]:
    """The runs whose lists differ, with the first differing position (at most ``limit``)."""
    out = []
    for run in sorted(set(expected) | set(got)):
        a, b = expected.get(run), got.get(run)
        if a == b:
            continue
        where = next((i for i, (x, y) in enumerate(zip(a or [], b or [], strict=False)) if x != y),
                     min(len(a or []), len(b or [])))
        out.append(f"{run} at #{where}: {(a or [])[where:where + 1]} -> {(b or [])[where:where + 1]}")
        if len(out) == limit:
            break
    return out


def test_the_corpora_give_the_decisions_of_the_previous_pipeline(tmp_path):
    out = tmp_path / "now.json"
    subprocess.run([sys.executable, str(SCRIPT), str(out)], check=True, cwd=ROOT, timeout=1800)
    golden, now = json.loads(gzip.decompress(GOLDEN.read_bytes())), json.loads(out.read_text())
    assert golden["produced_by"]["commit"], "the golden file names the commit it was produced on"
    assert sorted(now["calls"]) == sorted(golden["calls"]) == ["generated", "recorded"]
    assert sorted(now["decisions"]) == sorted(golden["decisions"])
    for corpus in golden["calls"]:
        assert sum(map(len, golden["calls"][corpus].values())) > 1000  # every span of every run, not a sample
        assert not differing(golden["calls"][corpus], now["calls"][corpus]), differing(
            golden["calls"][corpus], now["calls"][corpus])
    for replay in golden["decisions"]:
        decided = [d for run in golden["decisions"][replay].values() for d in run]
        assert any(d[0] != "allow" for d in decided)  # the corpora's loops are caught: a comparison that can fail
        assert not differing(golden["decisions"][replay], now["decisions"][replay]), differing(
            golden["decisions"][replay], now["decisions"][replay])

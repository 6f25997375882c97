"""Every progress step of stored sessions, call by call: what the engine made of each span, the evidence each step
got, against which earlier step, and the decisions that followed (issue 31's diagnosis).

    .venv/bin/python tools/progress_steps.py DATA_DIR [SESSION_SUBSTRING] [--scope session|trace|both]

Reads ``otel.genai_calls`` of a stopped service's data directory (a chDB directory opens in one process only) and
replays the rows through :class:`detector.core.engine.Engine` one span at a time, in span order, with the default
configuration: what the detector does with them whatever the cycles' batching. Per span: its kind, start and end
(seconds from the session's first span), tokens, the tools the model asked for, whether content is known; per step:
its kind, tools, whether its action and outcome are known, its sizes (``added``, ``out``), the idle wait before it,
its evidence and the earlier step it repeats (``k back``: k steps back in the scope's memory), and the run of wasted
steps. Developer tool: not part of the package.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ["LOOP_DETECTOR_PURE_PYTHON"] = "1"  # the core is wrapped below: its Python source
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detector.core import progress  # noqa: E402
from detector.core.engine import Engine  # noqa: E402
from detector.core.models import Call  # noqa: E402
from detector.core.progress import EVIDENCE_NAMES, ProgressMemory  # noqa: E402
from detector.core.steps import ProgressStep  # noqa: E402
from detector.detection.engine_config import engine_tuning  # noqa: E402
from detector.evaluation.offline import stored_calls  # noqa: E402
from detector.settings.config import AppConfig  # noqa: E402

KINDS = {0: "tool", 1: "reply", 2: "failed"}
_OBSERVED: list[tuple[ProgressMemory, ProgressStep, int, int | None, int]] = []
_observe = ProgressMemory.observe


def _logged_observe(self: ProgressMemory, step: ProgressStep) -> int:
    earlier = list(self.steps)
    level = _observe(self, step)
    back = next((len(earlier) - i for i in range(len(earlier) - 1, -1, -1)
                 if level and progress.match(step, earlier[i]) == level), None)
    _OBSERVED.append((self, step, level, back, self.run))
    return level


def describe(call: Call, t0: int) -> str:
    kind = "LLM " if call.is_llm else "TOOL" if call.is_tool else call.call_kind
    asked = ",".join(call.out_tool_names) or "-"
    return (f"{kind} {(call.ts_ns - t0) / 1e9:8.3f}-{(call.end_ns - t0) / 1e9:8.3f}s in={call.input_tokens:5d} "
            f"out={call.output_tokens:4d} tool={call.tool_name or '-'} asked={asked} "
            f"finish={','.join(call.finish_reasons) or '-'} content={int(call.has_content)} "
            f"args={'y' if call.args_fp else '-'} result={'y' if call.observation_fp else '-'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir")
    ap.add_argument("session", nargs="?", default="", help="only sessions whose id contains this")
    ap.add_argument("--scope", choices=["session", "trace", "both"], default="session")
    a = ap.parse_args()
    ProgressMemory.observe = _logged_observe  # type: ignore[method-assign]
    sessions: dict[str, list[Call]] = {}
    for call in stored_calls(Path(a.data_dir)):
        if a.session in call.session_id:
            sessions.setdefault(call.session_id, []).append(call)
    for session_id, calls in sorted(sessions.items()):
        calls.sort(key=lambda c: (c.ts_ns, c.span_id))
        engine = Engine(engine_tuning(AppConfig()))
        print(f"\n=== session {session_id}: {len(calls)} spans")
        t0 = calls[0].ts_ns
        for call in calls:
            _OBSERVED.clear()
            out = engine.process([call], now_us=call.ts_ns // 1000 + 1)
            print(describe(call, t0))
            scopes: dict[int, Any] = {id(st.progress): st for st in engine.states.values()}
            for memory, step, level, back, run in _OBSERVED:
                scope = scopes[id(memory)].scope if id(memory) in scopes else "?"
                if a.scope != "both" and scope != a.scope:
                    continue
                print(f"    step[{scope}] {KINDS.get(step.kind, step.kind)} tools={','.join(step.names) or '-'} "
                      f"act={'y' if step.act else '-'} outcome={'y' if step.outcome_known else '-'} "
                      f"added={step.added} out={step.out_tokens} wait={step.wait_ns / 1e9:.3f}s -> "
                      f"{EVIDENCE_NAMES[level]}{f' ({back} back)' if back else ''} run={run}")
            for event in out.events:
                if a.scope == "both" or event.get("scope") == a.scope:
                    print(f"    event[{event.get('scope')}] {event.get('kind')} {event.get('detector')} "
                          f"{event.get('action')} evidence={event.get('evidence')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

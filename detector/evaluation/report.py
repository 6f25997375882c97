"""The evaluation's metrics as a table for a terminal or as Markdown (the tables of ``docs/detection-quality.md``)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["render"]


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _fmt_delay(med: float | None, mx: int | None) -> str:
    if med is None:
        return "-"
    return f"{med:g} / {mx}"


def render(metrics: dict[str, Any], markdown: bool = False) -> str:
    """The tables: loop families (recall, delays), legit families (false positives), the summary matrix,
    and the targets."""
    systems = metrics["systems"]
    lines: list[str] = []

    def table(header: list[str], rows: list[list[str]]) -> None:
        if markdown:
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" if i == 0 or i == 1 else "---:" for i in range(len(header))) + "|")
            lines.extend("| " + " | ".join(r) + " |" for r in rows)
        else:
            widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
            fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
            lines.append(fmt.format(*header))
            lines.append("  ".join("-" * w for w in widths))
            lines.extend(fmt.format(*r) for r in rows)
        lines.append("")

    loop_fams = [f for f, v in metrics["families"].items() if next(iter(v.values()))["loop_runs"]]
    legit_fams = [f for f, v in metrics["families"].items() if next(iter(v.values()))["legit_runs"]]

    lines.append("## By configuration and content mode" if markdown else "BY CONFIGURATION AND CONTENT MODE")
    lines.append("")
    lines.append("Wasted calls to a flag count the first wasted call as 1 (flagged by the 2nd wasted call: 2)."
                 if markdown else "(wasted calls to a flag: the first wasted call counts as 1)")
    lines.append("")
    rows = []
    groups = [("all", metrics["overall"])] + [(mode, by) for mode, by in metrics.get("by_content", {}).items()]
    for mode, by_system in groups:
        for i, sys_ in enumerate(systems):
            m = by_system[sys_["name"]]
            rows.append([mode if i == 0 else "", sys_["label"], f"{m['loop_runs']}/{m['legit_runs']}",
                         _fmt_rate(m["recall_warn"]), _fmt_rate(m["recall_block"]),
                         f"{_fmt_rate(m['fp_rate_warn'])} ({m['fp_warn']})",
                         f"{_fmt_rate(m['fp_rate_block'])} ({m['fp_block']})",
                         _fmt_delay(m["calls_to_warn_median"], m["calls_to_warn_p90"]),
                         _fmt_delay(m["calls_to_block_median"], m["calls_to_block_p90"])])
    table(["content", "system", "loops/legit", "recall warn", "recall block", "false flags", "false blocks",
           "calls to warn med/p90", "calls to block med/p90"], rows)

    lines.append("## Loop runs: recall and wasted calls to a flag (the first wasted call counts as 1)" if markdown else
                 "LOOP RUNS: recall and wasted calls to a flag (the first wasted call counts as 1)")
    lines.append("")
    rows = []
    for fam in [*loop_fams, "ALL LOOP FAMILIES"]:
        for i, s in enumerate(systems):
            m = metrics["overall"][s["name"]] if fam == "ALL LOOP FAMILIES" else metrics["families"][fam][s["name"]]
            rows.append([fam if i == 0 else "", s["label"], str(m["loop_runs"]), _fmt_rate(m["recall_warn"]),
                         _fmt_rate(m["recall_block"]), _fmt_delay(m["calls_to_warn_median"], m["calls_to_warn_max"]),
                         _fmt_delay(m["calls_to_block_median"], m["calls_to_block_max"]), str(m["early_alarms"])])
    table(["family", "system", "runs", "recall warn", "recall block", "calls to warn med/max",
           "calls to block med/max", "early alarms"], rows)

    lines.append("## Legit runs: false positives" if markdown else "LEGIT RUNS: false positives")
    lines.append("")
    rows = []
    for fam in [*legit_fams, "ALL LEGIT FAMILIES"]:
        for i, s in enumerate(systems):
            m = metrics["overall"][s["name"]] if fam == "ALL LEGIT FAMILIES" else metrics["families"][fam][s["name"]]
            rows.append([fam if i == 0 else "", s["label"], str(m["legit_runs"]),
                         f"{_fmt_rate(m['fp_rate_warn'])} ({m['fp_warn']})", f"{_fmt_rate(m['fp_rate_block'])} ({m['fp_block']})"])
    table(["family", "system", "runs", "FP any action", "FP block"], rows)

    lines.append("## Summary: recall at warn (loop families) / false-positive rate (legit families)" if markdown else
                 "SUMMARY: recall at warn (loop families) / false-positive rate (legit families)")
    lines.append("")
    short = {s["name"]: _short_label(s) for s in systems}
    rows = []
    for fam in loop_fams:
        rows.append([fam, "recall"] + [_fmt_rate(metrics["families"][fam][s["name"]]["recall_warn"]) for s in systems])
    for fam in legit_fams:
        rows.append([fam, "FP"] + [_fmt_rate(metrics["families"][fam][s["name"]]["fp_rate_warn"]) for s in systems])
    table(["family", "metric"] + [short[s["name"]] for s in systems], rows)

    if metrics.get("preset_targets"):
        lines.append("## Targets" if markdown else "TARGETS")
        lines.append("")
        for t in metrics["preset_targets"]:
            mark = "met" if t["met"] else "NOT MET"
            where = f"{t['preset']}, content {t['content']}"
            lines.append(f"- {where}: {t['target']}: {t['value']} ({mark})" if markdown
                         else f"  [{mark:^7}] {where}: {t['target']}: {t['value']}")
        lines.append("")
    return "\n".join(lines)


def _short_label(system: dict[str, Any]) -> str:
    """A column header: a baseline's label up to its rule ("Gemini CLI: the same tool call..." -> "Gemini CLI")."""
    if system["kind"] != "baseline":
        return system["label"]
    return re.split(r"[:(]", system["label"], maxsplit=1)[0].strip()

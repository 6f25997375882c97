"""The fixed workaround cycle (issue 31), an honest run: an OpenHands-style coding agent rewrites its reproduction
script with the editor's ``create``, which refuses to overwrite (the same error each time), so it removes the file
(the same output), creates it with new content and runs it: every cycle's fixed steps repeat, and every run of the
script brings a new output (one cycle, in half the variants, prints what the previous one did). Progress is the
payload of the cycle, not its steps."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from detector.evaluation.corpus_records import CallSpec, ToolSpec
from detector.evaluation.corpus_text import RunBuilder, jitter, tokens_of

__all__ = ["Probe", "gen_workaround_cycle"]

EXIT_0 = "\n[The command completed with exit code 0.]"


@dataclass(frozen=True)
class Probe:
    """What one version of the reproduction script tries, and what it prints."""

    script: str
    output: str


# --- marshmallow: TimeDelta(precision="milliseconds") rounds some values down (marshmallow-code/marshmallow#1865)


PRECISIONS = ["microseconds", "milliseconds", "seconds", "minutes", "hours", "days", "weeks"]


def _timedelta_probe(rng: random.Random, k: int) -> Probe:
    precision = PRECISIONS[k % len(PRECISIONS)]
    values = sorted(rng.sample(range(2, 1000), 3))
    script = ("from datetime import timedelta\n\nfrom marshmallow.fields import TimeDelta\n\n"
              f"field = TimeDelta(precision={precision!r})\nfor value in {tuple(values)}:\n"
              f"    td = timedelta({precision}=value)\n"
              f"    print(f'{precision}={{value}} -> {{field.serialize(\"td\", {{\"td\": td}})}}')\n")
    unit = timedelta(**{precision: 1})
    # the float division of the bug report: int(0.345 / 0.001) == 344
    lines = [f"{precision}={v} -> {int(timedelta(**{precision: v}).total_seconds() / unit.total_seconds())}"
             for v in values]
    return Probe(script, "\n".join(lines))


# --- django: slugify() keeps leading and trailing dashes and underscores (django ticket #31498)


def _old_slugify(value: str) -> str:
    value = re.sub(r"[^\w\s-]", "", value.lower()).strip()
    return re.sub(r"[-\s]+", "-", value)


SLUG_WORDS = ["This is a test", "Hello World", "Release notes 4.1", "Ünïcode slug", "draft post", "Über uns",
              "Q3 report final", "naïve café", "tags & more", "API v2 — changes", "Straße am See", "résumé tips",
              "FAQ: billing", "São Paulo office", "C++ vs Rust", "100% organic"]


def _slugify_probe(rng: random.Random, k: int) -> Probe:
    texts = [rng.choice(["___", "--", "_-", " -_", ""]) + word + rng.choice(["---", "__", " -", "_"])
             for word in rng.sample(SLUG_WORDS, 3)]
    script = ("from django.utils.text import slugify\n\n"
              f"for value in {texts!r}:\n    print(repr(value), '->', repr(slugify(value, allow_unicode=True)))\n")
    return Probe(script, "\n".join(f"{t!r} -> {_old_slugify(t)!r}" for t in texts))


# --- astropy: separability_matrix of nested compound models (astropy/astropy#12906)

SEPARABILITY = [
    ("m.Linear1D(10) & m.Linear1D(5)", "[[ True False]\n [False  True]]"),
    ("m.Pix2Sky_TAN() & m.Linear1D(10) & m.Linear1D(5)",
     "[[ True  True False False]\n [ True  True False False]\n [False False  True False]\n [False False False  True]]"),
    ("m.Pix2Sky_TAN() & (m.Linear1D(10) & m.Linear1D(5))",
     "[[ True  True False False]\n [ True  True False False]\n [False False  True  True]\n [False False  True  True]]"),
    ("m.Shift(1) & m.Shift(2) | m.Scale(3) & m.Scale(4)", "[[ True False]\n [False  True]]"),
    ("(m.Shift(1) & m.Shift(2)) & m.Rotation2D(30)",
     "[[ True False False False]\n [False  True False False]\n [False False  True  True]\n [False False  True  True]]"),
    ("m.Mapping((0, 1, 0)) | m.Shift(1) & m.Shift(2) & m.Shift(3)",
     "[[ True False]\n [False  True]\n [ True False]]"),
    ("m.Polynomial2D(1) & m.Linear1D(3)", "[[ True  True False]\n [False False  True]]"),
]


def _separability_probe(rng: random.Random, k: int) -> Probe:
    model, matrix = SEPARABILITY[k % len(SEPARABILITY)]
    script = ("from astropy.modeling import models as m\nfrom astropy.modeling.separable import separability_matrix\n\n"
              f"cm = {model}\nprint(separability_matrix(cm))\n")
    return Probe(script, matrix)


ISSUES: list[tuple[str, str, Callable[[random.Random, int], Probe]]] = [
    ("marshmallow", "TimeDelta serialization with precision='milliseconds' loses a millisecond for some values",
     _timedelta_probe),
    ("django", "slugify() should strip leading and trailing dashes and underscores", _slugify_probe),
    ("astropy", "separability_matrix does not compute separability correctly for nested CompoundModels",
     _separability_probe),
]


def gen_workaround_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    repo, issue, probe_of = ISSUES[v % 3]
    b = RunBuilder(rng, model="claude-3-5-sonnet", task=f"<uploaded_files>\n/workspace/{repo}\n</uploaded_files>\n"
                   f"Consider the following issue: {issue}. Reproduce it with a script first, then fix it.")
    path = f"/workspace/{repo}/reproduce_issue.py"
    exists = (f"Invalid `path` parameter: {path}. File already exists at: {path}. Cannot overwrite files using command "
              "`create`.")
    as_text = v >= 4  # the editor's refusal as the observation's text, or as a failed tool span
    repeat_once = v % 2 == 1  # one cycle prints exactly what the previous one printed
    cycles = rng.randint(4, 6)
    order = rng.sample(range(len(SEPARABILITY)), cycles)
    probes: list[Probe] = []
    for k in range(cycles):
        probe, tries = probe_of(rng, order[k]), 1
        while any(probe.output == p.output for p in probes):  # two draws may print the same: draw again
            probe, tries = probe_of(rng, order[k] + tries), tries + 1
        probes.append(probe)
    repeated = rng.randint(2, cycles - 1) if repeat_once else None
    if repeated is not None:  # the script changed (a comment, a label), the output not
        probes[repeated] = Probe(probes[repeated - 1].script + "# run again: rule out a stale .pyc\n",
                                 probes[repeated - 1].output)

    def editor(script: str) -> ToolSpec:
        return ToolSpec("str_replace_editor", {"command": "create", "path": path, "file_text": script},
                        f"File created successfully at: {path}", 14, duration_s=0.05)

    def run_script(output: str) -> ToolSpec:
        result = output + EXIT_0
        return ToolSpec("execute_bash", {"command": f"cd /workspace/{repo} && python reproduce_issue.py"}, result,
                        tokens_of(result), duration_s=rng.uniform(0.6, 2.5))

    b.call(output_text=f"Let me look at the {repo} repository first.", gap_s=rng.uniform(0.5, 2.0),
           tools=[ToolSpec("execute_bash", {"command": f"cd /workspace/{repo} && git log --oneline -3 && ls"},
                           f"{rng.getrandbits(28):07x} Merge pull request #{rng.randint(1000, 9999)}\n"
                           f"{rng.getrandbits(28):07x} Update changelog\n{rng.getrandbits(28):07x} Fix docs build\n"
                           f"AUTHORS  CHANGELOG.rst  README.rst  docs  setup.py  src  tests{EXIT_0}", 60,
                           duration_s=0.4)])
    for k, probe in enumerate(probes):
        if k:
            fail = (ToolSpec("str_replace_editor", {"command": "create", "path": path, "file_text": probe.script},
                             f"ERROR:\n{exists}", tokens_of(exists) + 3, duration_s=0.05) if as_text else
                    ToolSpec("str_replace_editor", {"command": "create", "path": path, "file_text": probe.script}, "",
                             tokens_of(exists), error="ToolError", error_message=exists, duration_s=0.05))
            b.call(output_text="Let me try another input in the reproduction script.", tools=[fail],
                   output_tokens=tokens_of(probe.script) + 40, gap_s=b.tool_gap())
            b.call(output_text="The file already exists; I'll remove it and create it again.",
                   tools=[ToolSpec("execute_bash", {"command": f"rm {path}"}, EXIT_0.strip(), 12, duration_s=0.2)],
                   output_tokens=jitter(rng, 34), gap_s=b.tool_gap())
        b.call(output_text="Creating the reproduction script." if k == 0 else "", tools=[editor(probe.script)],
               output_tokens=tokens_of(probe.script) + 30, gap_s=b.tool_gap())
        b.call(output_text="Running it.", tools=[run_script(probe.output)], output_tokens=jitter(rng, 30),
               gap_s=b.tool_gap())
    b.call(output_text=f"The reproduction covers the issue across {cycles} inputs; now to the fix in the source.",
           gap_s=b.tool_gap())
    return b.calls, None, (f"{cycles} cycles of create (already exists) / rm / create / run, a new output each"
                           + (f" but cycle {repeated + 1}, which prints the previous output" if repeated else ""))

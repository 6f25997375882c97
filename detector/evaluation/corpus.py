"""A labeled corpus of agent runs for measuring detection quality (``loop-detector eval``).

Every scenario is one agent run (or, for the cross-session family, a few short conversations of one
caller) described call by call: the model call with its usage, its output text and the tools it asked
for, the ``execute_tool`` runs with their results or errors, timings, and optional message content.
:mod:`detector.evaluation.emit` turns each call into real GenAI spans (OpenTelemetry SDK, OTLP/HTTP) and
replays the corpus through the running service.

Labels:

- ``loop`` with ``onset``: the index (0-based, among the scenario's model calls) of the **first wasted
  call**, the first one that repeats earlier behaviour without progress (the first repeat of a tool
  call, the first retry of a failing call, the first regenerated answer, ...). The calls before it are
  a legitimate prefix. A perfect detector could raise a flag at ``onset`` at the earliest.
- ``legit``: a legitimate run, often one that *looks* repetitive (batch jobs, polling, pagination, ...).

Generation is pure and seeded (:func:`generate_corpus`): the same seed gives the same corpus, byte for
byte, independent of the machine and of ``PYTHONHASHSEED``. Timings are relative (gaps and durations in
seconds); the replay anchors each run so that it ends at about "now". Every run stays below 25 model
calls per trace, so the default per-trace call cap (a ceiling, not a loop detector) never decides.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

from detector.evaluation import honest_families as honest
from detector.evaluation import loop_families as loops
from detector.evaluation import outcome_loop_families as outcome_loops
from detector.evaluation import repeated_outcome_families as repeated
from detector.evaluation import waiting_families as waiting
from detector.evaluation import workaround_cycle
from detector.evaluation.corpus_records import MAX_CALLS_PER_TRACE, Gen, Scenario

__all__ = [
    "CONTENT_OFF_ONLY", "CORPUS_VERSION", "DEFAULT_SEED", "DEFAULT_VARIANTS", "FAMILIES", "FAMILY_DESCRIPTIONS", "GENERATORS",
    "LEGIT_FAMILIES", "LOOP_FAMILIES", "STRUCTURE_ONLY_WITHOUT_CONTENT",
    "generate_corpus", "generate_scenario", "read_corpus", "validate_scenario", "write_corpus",
]

DEFAULT_SEED = 20240611
DEFAULT_VARIANTS = 8  # runs per family; half with content capture on, half off
CORPUS_VERSION = 2  # 2: issue 31's families (a repeated outcome with and without progress, waiting for the world)

# ------------------------------------------------------------------------------------------ families

LOOP_FAMILIES = (
    "exact_tool_repeat",
    "ab_cycle",
    "long_cycle",
    "error_retry",
    "regenerated_text",
    "context_growth",
    "runaway_cost",
    "monologue",
    "empty_responses",
    "reworded_search",
    "shifted_reread",
    "handoff_bounce",
    "replan_go_on",
    "restart_loop",
    "fresh_id_error",
    # issue 31: repetition judged by its outcome
    "same_outcome",
    "empty_output_rerun",
    "think_between_failures",
)
LEGIT_FAMILIES = (
    "batch_template",
    "polling_backoff",
    "transient_error",
    "pagination",
    "same_greeting",
    "long_productive",
    "parallel_burst",
    "edit_test_cycle",
    "refined_search",
    "paged_read",
    "handoff_resolved",
    "go_on_progress",
    "restart_recovers",
    "flaky_backoff",
    "ci_poll_fixed",
    "page_scroll",
    # issue 31: waiting for the world
    "bare_status_poll",
    "retry_503_backoff",
    "rollout_poll_jitter",
    # issue 31: an outcome repeats, the run progresses
    "equal_size_batch",
    "same_empty_answer",
    "acknowledged_writes",
    "idempotent_read",
    "health_probe_between",
    "workaround_cycle",
)
FAMILIES = LOOP_FAMILIES + LEGIT_FAMILIES
# Loops whose runs without content carry nothing but structure. A tool's arguments are unknown and the model asks for
# the same call at a length that varies with its words, so the same call again is not seen: equal sizes are no
# evidence (a procedure over items has them too; docs/signals.md, "Progress"), and a failure said in words is not
# seen either. A reworded request, every size varying; same_outcome: every change differs in size. Nothing tells them
# from honest work but the content, which is not there, or the app's fingerprints (the SDKs' completion hook), which
# catch them as content does (docs/detection-quality.md reports them apart). Measured with content only in the CI
# subset (tests/evaluation). Without content, the loops seen are those whose steps are the same call, answered alike
# to the token, failures with an error status, replies regenerated at the same length, and budgets.
STRUCTURE_ONLY_WITHOUT_CONTENT = frozenset({
    "exact_tool_repeat", "ab_cycle", "long_cycle", "context_growth", "runaway_cost", "reworded_search",
    "shifted_reread", "handoff_bounce", "replan_go_on", "restart_loop", "same_outcome", "empty_output_rerun",
    "think_between_failures"})
# Families whose runs only make sense without content capture, every variant: one procedure over items whose results
# have the same size to the token (with content, the items differ in every result; without, every step's sizes are
# equal: structure alone, which must never flag). The CI subset measures it without content, its only mode.
CONTENT_OFF_ONLY = frozenset({"equal_size_batch"})

FAMILY_DESCRIPTIONS = {
    "exact_tool_repeat": "the same tool call with the same arguments, again and again",
    "ab_cycle": "two steps alternating: A, B, A, B, ...",
    "long_cycle": "a cycle of 3 or 4 steps repeating",
    "error_retry": "the same failing tool call or request retried, failing the same way",
    "regenerated_text": "the harness rejects the answer; near-identical text regenerated (numbers, times, paraphrase)",
    "context_growth": "the context keeps growing with re-retrieved, already-seen material",
    "runaway_cost": "large contexts re-sent fast: tokens and cost burn without progress",
    "monologue": "the model talks to itself without tools, restating the same plan",
    "empty_responses": "empty model responses, re-prompted again and again",
    "batch_template": "one prompt template over many different documents",
    "polling_backoff": "a status check repeated with exponential backoff until the job is done",
    "transient_error": "a transient error retried once, then the run goes on",
    "pagination": "the same listing call page after page (cursor changes, results differ)",
    "same_greeting": "many short conversations opening with the same greeting",
    "long_productive": "a long run of varied, productive steps",
    "parallel_burst": "bursts of parallel tool calls (same tool, different arguments)",
    "edit_test_cycle": "edit, run the tests, edit, run the tests: the edits and the test output change",
    "reworded_search": "a few rewordings of a search, each answered with nothing, asked again and again",
    "shifted_reread": "the same log re-read at shifting offsets, ~9k tokens a read, every window the same lines",
    "handoff_bounce": "two agents handing the task back and forth with reworded reasons",
    "replan_go_on": "no tools: the same plan restated while the user says 'go on'",
    "restart_loop": "a run restarted again and again in new traces of one session, failing the same way",
    "fresh_id_error": "the same call failing the same way, a fresh request id and time in each error",
    "refined_search": "an empty search or two, then a refined one finds the answer",
    "paged_read": "a large log read window after window, each new",
    "handoff_resolved": "a hand-off and a hand-back after progress (the crash confirmed), then the refund",
    "go_on_progress": "no tools: after each 'go on', the next step of a runbook",
    "restart_recovers": "a run failing on a transient error, restarted once, succeeding",
    "flaky_backoff": "a flaky API retried with growing backoff, then it works and the run goes on",
    "ci_poll_fixed": "a CI run polled at a fixed interval, the same answer until it succeeds",
    "page_scroll": "a page scrolled viewport after viewport: the same call, pages of about the same size",
    "same_outcome": "many different changes (edits, config keys, form fields), each acknowledged, each followed by the "
                    "same check whose output comes back byte for byte",
    "empty_output_rerun": "the same command re-run again and again, its captured output empty every time",
    "think_between_failures": "the same failing booking re-sent, a think step with a different thought between attempts",
    "bare_status_poll": "a job polled, the answer a bare status word ('running' ... 'succeeded'), waits doubling",
    "retry_503_backoff": "the same call failing with the same 503 after waits of ~2.4, 4.8, 9.6 s, then answered",
    "rollout_poll_jitter": "a rollout polled every ~5-10 s (+-20%), its replica counts moving until complete",
    "equal_size_batch": "one procedure over 20-25 items, every result the same size (content capture off only)",
    "same_empty_answer": "different people checked, each answered '[]', then something found",
    "acknowledged_writes": "different files written ('File written.' / 'File created') and attached ('True')",
    "idempotent_read": "one document read under different arguments (id=7, id='7', slug), between other work",
    "health_probe_between": "real work steps with new results, a health probe with the same payload between them",
    "workaround_cycle": "create fails (exists) / rm / create / run, each cycle's script and output new",
}


GENERATORS: dict[str, Gen] = {
    "exact_tool_repeat": loops.gen_exact_tool_repeat,
    "ab_cycle": loops.gen_ab_cycle,
    "long_cycle": loops.gen_long_cycle,
    "error_retry": loops.gen_error_retry,
    "regenerated_text": loops.gen_regenerated_text,
    "context_growth": loops.gen_context_growth,
    "runaway_cost": loops.gen_runaway_cost,
    "monologue": loops.gen_monologue,
    "empty_responses": loops.gen_empty_responses,
    "batch_template": honest.gen_batch_template,
    "polling_backoff": honest.gen_polling_backoff,
    "transient_error": honest.gen_transient_error,
    "pagination": honest.gen_pagination,
    "same_greeting": honest.gen_same_greeting,
    "long_productive": honest.gen_long_productive,
    "parallel_burst": honest.gen_parallel_burst,
    "edit_test_cycle": honest.gen_edit_test_cycle,
    "reworded_search": loops.gen_reworded_search,
    "shifted_reread": loops.gen_shifted_reread,
    "handoff_bounce": loops.gen_handoff_bounce,
    "replan_go_on": loops.gen_replan_go_on,
    "restart_loop": loops.gen_restart_loop,
    "fresh_id_error": loops.gen_fresh_id_error,
    "refined_search": honest.gen_refined_search,
    "paged_read": honest.gen_paged_read,
    "handoff_resolved": honest.gen_handoff_resolved,
    "go_on_progress": honest.gen_go_on_progress,
    "restart_recovers": honest.gen_restart_recovers,
    "flaky_backoff": honest.gen_flaky_backoff,
    "ci_poll_fixed": honest.gen_ci_poll_fixed,
    "page_scroll": honest.gen_page_scroll,
    "same_outcome": outcome_loops.gen_same_outcome,
    "empty_output_rerun": outcome_loops.gen_empty_output_rerun,
    "think_between_failures": outcome_loops.gen_think_between_failures,
    "bare_status_poll": waiting.gen_bare_status_poll,
    "retry_503_backoff": waiting.gen_retry_503_backoff,
    "rollout_poll_jitter": waiting.gen_rollout_poll_jitter,
    "equal_size_batch": repeated.gen_equal_size_batch,
    "same_empty_answer": repeated.gen_same_empty_answer,
    "acknowledged_writes": repeated.gen_acknowledged_writes,
    "idempotent_read": repeated.gen_idempotent_read,
    "health_probe_between": repeated.gen_health_probe_between,
    "workaround_cycle": workaround_cycle.gen_workaround_cycle,
}


def generate_scenario(family: str, variant: int, seed: int = DEFAULT_SEED) -> Scenario:
    """One run of ``family``; variants alternate content capture (pairs: 0-1 on, 2-3 off, ...; always off for
    :data:`CONTENT_OFF_ONLY`) and cycle through the family's sub-patterns."""
    rng = random.Random(f"{seed}:{family}:{variant}")
    calls, onset, description = GENERATORS[family](rng, variant)
    capture = (variant // 2) % 2 == 0  # variants 0,1 on; 2,3 off; 4,5 on; ... (sub-patterns use variant % 4)
    capture = capture and family not in CONTENT_OFF_ONLY
    label = "loop" if family in LOOP_FAMILIES else "legit"
    for session in {c.session for c in calls}:
        n = sum(1 for c in calls if c.session == session)
        if n > MAX_CALLS_PER_TRACE:
            raise AssertionError(f"{family}/{variant}: {n} calls in one trace")
    return Scenario(
        id=f"{family}-{variant:02d}", family=family, label=label, onset=onset, capture_content=capture,
        description=description, calls=calls, virtual_key=f"vk-{family.replace('_', '-')}",
        agent_name=f"{family}-agent",
    )


def generate_corpus(seed: int = DEFAULT_SEED, variants: int = DEFAULT_VARIANTS,
                    families: Iterable[str] = FAMILIES) -> list[Scenario]:
    """The built-in corpus: ``variants`` runs of every family (deterministic for a seed)."""
    return [generate_scenario(f, v, seed) for f in families for v in range(variants)]


def write_corpus(scenarios: Iterable[Scenario], directory: str | Path) -> list[Path]:
    """One JSON file per scenario (``<id>.json``), plus ``index.json`` listing them."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths, index = [], []
    for sc in scenarios:
        path = out / f"{sc.id}.json"
        path.write_text(json.dumps(sc.to_dict(), indent=1, sort_keys=True) + "\n")
        paths.append(path)
        index.append({"id": sc.id, "family": sc.family, "label": sc.label, "onset": sc.onset,
                      "capture_content": sc.capture_content, "calls": len(sc.calls)})
    (out / "index.json").write_text(json.dumps({"version": CORPUS_VERSION, "scenarios": index}, indent=1) + "\n")
    return paths


def read_corpus(directory: str | Path) -> list[Scenario]:
    """Every ``*.json`` scenario file of a directory (``index.json`` excluded), sorted by id."""
    scenarios = []
    for path in sorted(Path(directory).glob("*.json")):
        if path.name == "index.json":
            continue
        data = json.loads(path.read_text())
        scenarios.append(validate_scenario(Scenario.from_dict(data), str(path)))
    if not scenarios:
        raise ValueError(f"no scenario files in {directory}")
    return sorted(scenarios, key=lambda s: s.id)


def validate_scenario(sc: Scenario, source: str = "scenario") -> Scenario:
    errors = []
    if sc.label not in ("loop", "legit"):
        errors.append(f"label must be 'loop' or 'legit', got {sc.label!r}")
    if sc.label == "loop" and (sc.onset is None or not 0 <= sc.onset < len(sc.calls)):
        errors.append(f"a loop needs an onset in 0..{len(sc.calls) - 1}, got {sc.onset!r}")
    if sc.label == "legit" and sc.onset is not None:
        errors.append("a legit run has no onset")
    if not sc.calls:
        errors.append("no calls")
    if errors:
        raise ValueError(f"{source}: " + "; ".join(errors))
    return sc

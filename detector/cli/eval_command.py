"""``loop-detector eval``: the command's arguments turned into a replay and a report.

The measuring lives in :mod:`detector.evaluation` (``evaluate``: the repository's corpora; ``real_runs_eval``: real
agents' runs); this module only reads the options, loads what they name, and prints. Kept apart so that the evaluation
modules import each other in one direction.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from detector.evaluation.evaluate import run_eval, schema_fingerprint
from detector.evaluation.quality import LOOP_DETECTOR
from detector.evaluation.report import render

__all__ = ["run_cli"]


def run_cli(args: Any) -> int:
    """``loop-detector eval``: see :func:`detector.cli.main.build_parser` for the options."""
    from detector.evaluation.corpus import (
        DEFAULT_SEED,
        DEFAULT_VARIANTS,
        FAMILIES,
        generate_corpus,
        read_corpus,
        write_corpus,
    )
    from detector.settings.config import ConfigError, load_config

    if getattr(args, "real_runs", None):
        return _real_runs_cli(args)
    families = [f.strip() for f in args.families.split(",")] if args.families else None
    if families:
        unknown = sorted(set(families) - set(FAMILIES)) if not (args.corpus or getattr(args, "recorded", False)) else []
        if unknown:
            print(f"unknown families: {', '.join(unknown)} (known: {', '.join(FAMILIES)})", file=sys.stderr)
            return 2
    seed = DEFAULT_SEED if args.seed is None else args.seed
    variants = DEFAULT_VARIANTS if args.variants is None else args.variants
    if args.write_corpus:
        scenarios = generate_corpus(seed, variants, families or FAMILIES)
        paths = write_corpus(scenarios, args.write_corpus)
        print(f"wrote {len(paths)} scenarios to {args.write_corpus} (seed {seed})")
        return 0
    try:
        recorded_dir = _recorded_dir(args)
        if recorded_dir is not None:
            from detector.evaluation.recorded import load_recordings

            scenarios = load_recordings(recorded_dir)
            if families:
                scenarios = [s for s in scenarios if s.family in families]
        elif args.corpus:
            scenarios = read_corpus(args.corpus)
            if families:
                scenarios = [s for s in scenarios if s.family in families]
        else:
            scenarios = generate_corpus(seed, variants, families or FAMILIES)
        config = load_config(args.config) if args.config else None
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"cannot read the corpus: {exc}", file=sys.stderr)
        return 2
    if not scenarios:
        print("no scenarios to evaluate", file=sys.stderr)
        return 2
    label = LOOP_DETECTOR if not args.config else f"{LOOP_DETECTOR} ({Path(args.config).name})"
    metrics = run_eval(scenarios, config, config_label=label, blocking_pass=not args.no_blocking_pass,
                       progress=not args.quiet)
    source = (f"recorded ({recorded_dir})" if recorded_dir is not None else args.corpus) or \
        f"built-in (seed {seed}, {variants} per family)"
    metrics["corpus"] = {"source": source,
                         "runs": len(scenarios), "loop_runs": sum(s.label == "loop" for s in scenarios),
                         "legit_runs": sum(s.label == "legit" for s in scenarios),
                         "calls": sum(len(s.calls) for s in scenarios)}
    metrics["schema"] = schema_fingerprint()
    header = (f"corpus: {metrics['corpus']['source']}: {metrics['corpus']['runs']} runs "
              f"({metrics['corpus']['loop_runs']} loops, {metrics['corpus']['legit_runs']} legit), "
              f"{metrics['corpus']['calls']} model calls; "
              + ", ".join(f"{r['config']} replayed in {r['seconds']:.0f} s" for r in metrics["replays"]))
    print(header + "\n")
    print(render(metrics, markdown=args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(metrics, indent=1) + "\n")
        print(f"results written to {args.json}", file=sys.stderr)
    return 0


def _real_runs_cli(args: Any) -> int:
    """``loop-detector eval --real-runs FILE``: the yardstick (:mod:`detector.evaluation.real_runs_eval`)."""
    from detector.evaluation.real_runs import CONTENT_MODES, LABELS_FILE, ContentMode, load_labels, load_real_runs
    from detector.evaluation.real_runs_eval import run_real_eval
    from detector.evaluation.real_runs_report import render_real_eval

    try:
        runs = load_real_runs(args.real_runs)
        labels = load_labels(args.labels or LABELS_FILE)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read the real runs: {exc}", file=sys.stderr)
        return 2
    if not any(r.id in labels for r in runs):
        print("none of the runs has a label: rebuild them with extract.py (corpora/real-runs/README.md)", file=sys.stderr)
        return 2
    modes = [m.strip() for m in (getattr(args, "content", None) or ",".join(CONTENT_MODES)).split(",") if m.strip()]
    unknown = [m for m in modes if m not in CONTENT_MODES]
    if unknown or not modes:
        print(f"unknown content mode {', '.join(unknown) or '(none)'}: choose from {', '.join(CONTENT_MODES)}",
              file=sys.stderr)
        return 2
    keep = Path(args.keep_replay) if getattr(args, "keep_replay", None) else None
    if keep is not None and keep.exists() and any(keep.iterdir()):
        print(f"--keep-replay {keep}: not empty (the replay needs a new data directory)", file=sys.stderr)
        return 2
    report = run_real_eval(runs, labels, presets=("default",) if args.no_blocking_pass else ("default", "protect"),
                           tool_errors=args.tool_errors, progress=not args.quiet,
                           modes=cast("list[ContentMode]", modes), keep_replay=keep)
    print(render_real_eval(report, markdown=args.markdown))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print(f"results written to {args.json}", file=sys.stderr)
    if keep is not None:
        print(f"the default preset's replay kept in {keep}", file=sys.stderr)
    return 0


def _recorded_dir(args: Any) -> Path | None:
    """The recorded corpus to evaluate: ``--recorded`` (the repository's ``recordings/``, or ``--recordings DIR``),
    or ``--corpus DIR`` when DIR holds a ``manifest.json`` (recordings, rather than scenario files)."""
    from detector.evaluation.recorded import recordings_dir

    if getattr(args, "recorded", False) or getattr(args, "recordings", None):
        return recordings_dir(getattr(args, "recordings", None))
    if args.corpus and (Path(args.corpus) / "manifest.json").is_file():
        return Path(args.corpus)
    return None

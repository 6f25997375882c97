"""What the SDK examples share: a loop-detector and a stub model started in-process unless URLs are given.

    with local_stack(args.loop_detector, args.model_url) as (api, model_url):
        ...  # api: loop-detector's API; model_url: the stub's base URL (OpenAI: + "/v1"; Anthropic: as is)

The in-process loop-detector runs with two blocking rules on, so that a looping agent is stopped *before*
its next repeat (the pre-flight check of the pending call): the same tool call three times in a row, and
the same request four times in a row. (A fresh install has notify-only rules: see ``docs/api.md``.)
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BLOCKING_RULES = [
    {"name": "stop-tool-loop", "detector": "failure_loop", "action": "block", "params": {"same_tool_repeats": 3}},
    {"name": "stop-repeat", "detector": "exact_prompt_repeat", "action": "block", "params": {"repeats": {1: 4}}},
]


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--loop-detector", help="loop-detector API URL (default: start one in-process)")
    p.add_argument("--model-url", help="base URL of the model API (default: start examples/openai_stub.py in-process)")
    p.add_argument("--session", help="session id (default: a new one)")
    return p


@contextmanager
def local_stack(api: str | None, model_url: str | None) -> Iterator[tuple[str, str]]:
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    with ExitStack() as stack:
        if api is None:
            from detector.service.process import running_service
            from detector.settings.config import parse_config

            config = parse_config({"detector": {"interval_seconds": 0.2}, "rules": BLOCKING_RULES})
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="loop-detector-example-"))
            _, eps = stack.enter_context(running_service(config, data_dir))
            api = eps.api
            print(f"loop-detector in-process: {api}")
        if model_url is None:
            from openai_stub import serve_stub

            model_url = stack.enter_context(serve_stub())
            print(f"stub model in-process: {model_url}")
        yield api, model_url.rstrip("/")

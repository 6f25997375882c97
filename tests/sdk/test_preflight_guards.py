"""The pre-flight progress check through a real framework guard: LangChain v1 (``create_agent`` with
``LoopGuardMiddleware`` on ``ChatOpenAI``) against the local stub model and a live service whose only rule is a
blocking ``no_progress`` (3 wasted steps, exact evidence), and no telemetry at all: no span reaches the service, only
the guard's checks and their fingerprints (``pending.evidence``: hashes, never text).

* A looping agent (the same read bringing back the same) is refused before the model call that follows its 3rd
  wasted step: 4 reads ran, the 5th model call never reached the model.
* The same agent whose read brings back something new each time (a file that changes) finishes its work.
"""

from __future__ import annotations

from typing import Any

import pytest
from loop_detector_sdk import LoopBlockedError, LoopGuard
from support.enforcement import make_config, uid

from detector.service.process import running_service

MODEL = "gpt-4o-mini"
NO_PROGRESS_ONLY = [{"name": "stop-no-progress", "detector": "no_progress", "action": "block",
                     "params": {"wasted_calls": 3, "min_evidence": "exact"}}]

pytest.importorskip("langchain.agents")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    with running_service(make_config(rules=NO_PROGRESS_ONLY), tmp_path_factory.mktemp("preflight")) as (service, eps):
        yield service, eps


def agent(url: str, results: list[str], system: str) -> tuple[Any, list[str]]:
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    ran: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        ran.append(path)
        return results[min(len(ran), len(results)) - 1]

    def make(middleware: Any) -> Any:
        model = ChatOpenAI(model=MODEL, base_url=url + "/v1", api_key="stub", max_retries=0)
        return create_agent(model, [read_file], system_prompt=system, middleware=[middleware])

    return make, ran


def test_the_guards_fingerprints_alone_refuse_a_looping_agent(svc, stub):
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    url, requests = stub
    make, ran = agent(url, ["port: 80"], "[loop] You fix configs.")
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        mark = len(requests)
        with pytest.raises(LoopBlockedError) as info:
            make(LoopGuardMiddleware(guard, session_id=uid("pre-loop"))).invoke(
                {"messages": [{"role": "user", "content": "Fix the config."}]},
                {"recursion_limit": 30})  # (without the check, the stub's loop would go on for long)
    assert info.value.reason == "no_progress" and info.value.body["error"]["evidence"] == "exact"
    assert ran == ["config.yaml"] * 4 and len(requests) - mark == 4


def test_an_agent_whose_reads_bring_something_new_finishes(svc, stub):
    from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware

    _, eps = svc
    url, _ = stub
    contents = ["the parser is a recursive descent one over tokens", "the lexer is table driven and reads bytes",
                "settings come from a YAML file beside the binary", "plugins are found through entry points at start",
                "the scheduler runs cron expressions in local time", "metrics are Prometheus counters and histograms"]
    make, ran = agent(url, contents, "[loop 6] You fix configs.")
    with LoopGuard(eps.api, blocklist_interval=None) as guard:
        out = make(LoopGuardMiddleware(guard, session_id=uid("pre-honest"))).invoke(
            {"messages": [{"role": "user", "content": "Fix the config."}]})
    assert len(ran) == 6 and "giving up" in out["messages"][-1].content

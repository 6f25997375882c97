"""The corpus's records: a scenario (one labeled agent run), its model calls and their tool runs, and the type of a
family's generator. Plain dataclasses, serialized as JSON scenario files (``loop-detector eval --write-corpus``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CallSpec", "Gen", "MAX_CALLS_PER_TRACE", "Scenario", "ToolSpec",
]

MAX_CALLS_PER_TRACE = 24  # below the default 25-call cap


@dataclass
class ToolSpec:
    """One tool the model asked for, and how its ``execute_tool`` run went."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: str = ""  # the tool's output (the next model call sees it); content capture only
    result_tokens: int = 0  # how much the result adds to the context
    error: str | None = None  # error.type when the tool fails
    error_message: str = ""
    duration_s: float = 0.2


@dataclass
class CallSpec:
    """One model call of a run (a ``chat`` span) and the tools it ran afterwards."""

    user_text: str = ""  # a new user / harness message appended before this call
    output_text: str = ""
    tools: list[ToolSpec] = field(default_factory=list)
    input_tokens: int = 500
    output_tokens: int = 60
    model: str = "gpt-4o-mini"
    error: str | None = None  # error.type when the model call itself fails
    error_message: str = ""
    duration_s: float = 1.0
    gap_s: float = 0.5  # idle time between the end of the previous step and this call
    session: int = 0  # which conversation of the scenario (a new trace and session id each)
    run: int = 0  # which agent run of the conversation (a new trace, the same session: a restarted run)
    cost_usd: float | None = None  # gen_ai.usage.cost, as OpenLIT-style instrumentations report it
    max_tokens: int | None = None
    restart: bool = False  # the conversation history is reset before this call (a stateless request)
    keep_output: bool = True  # the reply is appended to the conversation (False: the harness discards it)


@dataclass
class Scenario:
    id: str
    family: str
    label: str  # 'loop' | 'legit'
    onset: int | None
    capture_content: bool
    description: str
    calls: list[CallSpec]
    virtual_key: str = ""
    agent_name: str = "agent"
    # content capture off, and the chat spans carry the app's fingerprints of the conversation (what the completion
    # hook sets: docs/sdk.md, "Fingerprints")
    app_fingerprints: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        calls = []
        for c in data["calls"]:
            c = dict(c)
            c["tools"] = [ToolSpec(**t) for t in c.get("tools", [])]
            calls.append(CallSpec(**c))
        values = {k: v for k, v in data.items() if k != "calls"}
        return cls(**values, calls=calls)

    @property
    def sessions(self) -> list[int]:
        return sorted({c.session for c in self.calls})


# ---------------------------------------------------------------------------------------- generators
#
# Each generator returns (calls, onset, description). ``v`` is the variant number: it selects the
# sub-pattern, so every family covers its variations whatever the seed.

Gen = Callable[[random.Random, int], tuple[list[CallSpec], int | None, str]]

"""An OpenAI Agents SDK agent guarded by loop-detector (a model-input filter and run hooks).

    python examples/openai_agents_sdk.py                     # stub model + loop-detector in-process
    python examples/openai_agents_sdk.py --loop-detector http://127.0.0.1:8080 --model-url http://127.0.0.1:8765

``guard_run_config`` checks every model call of the run (``call_model_input_filter``: fingerprint of model,
input and instructions; inject goes into the instructions); ``LoopGuardHooks`` checks every tool call
(``on_tool_start``). The stub model repeats ``read_file("config.yaml")``: the third identical call is refused
before it runs and ``Runner.run`` raises ``LoopBlockedError``. Needs ``pip install openai-agents``.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from _harness import local_stack, parser
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from loop_detector_sdk import AsyncLoopGuard, LoopBlockedError
from loop_detector_sdk.openai_agents_hooks import LoopGuardHooks, guard_run_config
from openai import AsyncOpenAI


@function_tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    print(f"  tool  read_file({json.dumps(path)})")
    return "port: 8080"


async def run(api: str, base: str, session: str) -> None:
    async with AsyncLoopGuard(api) as guard:
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini",
                                           openai_client=AsyncOpenAI(base_url=base + "/v1", api_key="sk-stub"))
        agent = Agent(name="fixer", instructions="You fix configs. [loop]", tools=[read_file], model=model)
        try:
            await Runner.run(agent, "Fix the failing config.", max_turns=10,
                             run_config=guard_run_config(guard, session_id=session),
                             hooks=LoopGuardHooks(guard, session_id=session))
        except LoopBlockedError as exc:
            print(f"blocked by loop-detector: {json.dumps(exc.body)}")


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    set_tracing_disabled(True)  # the stub is not OpenAI: no trace export to OpenAI's servers
    session = args.session or f"agents-{uuid.uuid4().hex[:6]}"
    with local_stack(args.loop_detector, args.model_url) as (api, base):
        print(f"session {session}")
        asyncio.run(run(api, base, session))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A LangChain v1 agent (``create_agent``, on LangGraph) guarded by loop-detector's agent middleware.

    python examples/langchain_agent.py                       # stub model + loop-detector in-process
    python examples/langchain_agent.py --loop-detector http://127.0.0.1:8080 --model-url http://127.0.0.1:8765

``LoopGuardMiddleware`` asks loop-detector before every model call (fingerprint of model, messages, system
prompt; inject goes into the system message) and before every tool call (name + arguments). The stub model
repeats ``read_file("config.yaml")``: the third identical tool call is refused before it runs, and
``agent.invoke`` raises ``LoopBlockedError``. The LangGraph thread id is the session when none is given.
Needs ``pip install langchain langchain-openai`` (or the SDK's ``langchain`` extra, plus langchain-openai).
"""

from __future__ import annotations

import json
import uuid

from _harness import local_stack, parser
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from loop_detector_sdk import LoopBlockedError, LoopGuard
from loop_detector_sdk.langchain_middleware import LoopGuardMiddleware


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    print(f"  tool  read_file({json.dumps(path)})")
    return "port: 8080"


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    session = args.session or f"langchain-{uuid.uuid4().hex[:6]}"
    with local_stack(args.loop_detector, args.model_url) as (api, base), LoopGuard(api) as guard:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=base + "/v1", api_key="sk-stub", max_retries=0)
        agent = create_agent(model, [read_file], system_prompt="You fix configs. [loop]",
                             middleware=[LoopGuardMiddleware(guard)])
        print(f"session (LangGraph thread) {session}")
        try:
            agent.invoke({"messages": [{"role": "user", "content": "Fix the failing config."}]},
                         config={"configurable": {"thread_id": session}, "recursion_limit": 30})
        except LoopBlockedError as exc:
            print(f"blocked by loop-detector: {json.dumps(exc.body)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

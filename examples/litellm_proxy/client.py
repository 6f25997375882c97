"""An unmodified OpenAI-SDK app behind the LiteLLM proxy (examples/litellm_proxy/config.yaml): it retries the
same request, and the gateway's loop-detector guardrail refuses the repeat with HTTP 429.

    python examples/litellm_proxy/client.py --proxy http://127.0.0.1:4000 [--key $LITELLM_MASTER_KEY]

The only loop-detector-specific line is the session header (optional: LiteLLM's own ``x-litellm-session-id``
or ``metadata.session_id`` work too; without any, the gateway scopes repeats by the virtual key).
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

import openai


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--proxy", default="http://127.0.0.1:4000")
    p.add_argument("--key", default=os.environ.get("LITELLM_MASTER_KEY", "sk-1234"))
    p.add_argument("--session", default=f"gateway-{uuid.uuid4().hex[:6]}")
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.proxy + "/v1", api_key=args.key, max_retries=0,
                           default_headers={"x-loop-detector-session-id": args.session})
    messages = [{"role": "user", "content": "Deploy the service again."}]
    print(f"session {args.session}")
    for attempt in range(1, 7):
        try:
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            print(f"{attempt:>3}  200  {reply.choices[0].message.content[:60]}")
        except openai.RateLimitError as exc:
            retry = exc.response.headers.get("retry-after")
            print(f"{attempt:>3}  429  Retry-After: {retry}  {json.dumps(exc.body)}")
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

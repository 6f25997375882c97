"""The agent frameworks loop-detector is tested with (tests/ingest/test_frameworks.py): the environment each runs
in (a cached venv, :mod:`support.venvs`, or a node_modules for the Vercel AI SDK), pinned to the versions the
docs name (docs/instrumentations.md)."""

from __future__ import annotations

__all__ = ["NODE_PACKAGES", "PYTHON_ENVS"]

_EXPORTER = ["opentelemetry-sdk>=1.30", "opentelemetry-exporter-otlp-proto-http>=1.30"]

PYTHON_ENVS: dict[str, list[str]] = {
    # pydantic-ai's own instrumentation (InstrumentationSettings), OpenAI provider
    "pydantic-ai": ["pydantic-ai-slim[openai]==2.68.0", *_EXPORTER],
    # the OpenAI Agents SDK (Responses API) through OpenInference (the versions of the recorded corpus, recordings/)
    "openai-agents": ["openai-agents==0.24.0", "openinference-instrumentation-openai-agents==2.6.0", *_EXPORTER],
    # Strands Agents' built-in tracer, OpenAI model provider (streams)
    "strands": ["strands-agents[openai]==1.62.0", *_EXPORTER],
    # Google ADK's built-in tracer (call_llm, execute_tool), the model through ADK's LiteLLM wrapper
    "google-adk": ["google-adk==2.13.0", "litellm", *_EXPORTER],
    # CrewAI through OpenInference (its common instrumentation), LLM calls through the OpenAI SDK
    "crewai": ["crewai==1.15.30", "openinference-instrumentation-crewai==1.1.21",
               "openinference-instrumentation-openai==0.1.66", *_EXPORTER],
    # LangGraph through OpenInference and through OpenLLMetry
    "langgraph-openinference": ["langgraph==1.2.22", "langchain-openai==1.7.4",
                                "openinference-instrumentation-langchain==0.1.80", *_EXPORTER],
    "langgraph-openllmetry": ["langgraph==1.2.22", "langchain-openai==1.7.4",
                              "opentelemetry-instrumentation-langchain==0.62.4", *_EXPORTER],
}

# The Vercel AI SDK v6 (the last major the issue names), its OpenAI provider, and the OpenTelemetry JS SDK
NODE_PACKAGES: list[str] = ["ai@6", "@ai-sdk/openai@3", "@opentelemetry/api@1", "@opentelemetry/sdk-trace-base@2",
                            "@opentelemetry/exporter-trace-otlp-proto", "@opentelemetry/context-async-hooks@2"]

"""Attribute names: the OpenTelemetry GenAI semantic conventions and loop-detector's own.

One place for every attribute name the Python side reads or writes (the normalization in
``clickhouse/genai_calls_normalized.sql.tmpl`` spells the same names for the store side).
"""

__all__ = [
    "GEN_AI_OPERATION_NAME", "GEN_AI_PROVIDER_NAME", "GEN_AI_REQUEST_MODEL", "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS", "GEN_AI_USAGE_INPUT_TOKENS", "GEN_AI_USAGE_OUTPUT_TOKENS",
    "GEN_AI_CONVERSATION_ID", "GEN_AI_AGENT_NAME", "GEN_AI_INPUT_MESSAGES", "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_TOOL_NAME", "GEN_AI_TOOL_CALL_ID", "GEN_AI_TOOL_CALL_ARGUMENTS", "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_REQUEST_MAX_TOKENS", "GEN_AI_USAGE_COST", "ERROR_TYPE", "LOOP_VIRTUAL_KEY", "LOOP_FEATURE", "OP_CHAT",
    "OP_EXECUTE_TOOL", "OP_INVOKE_AGENT",
]

# GenAI semantic conventions (current names)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_USAGE_COST = "gen_ai.usage.cost"  # not a semantic convention: OpenLIT's, read by the view
ERROR_TYPE = "error.type"


# loop-detector's own attributes (set by the SDK helpers or the app, on spans or the resource)
LOOP_VIRTUAL_KEY = "loop_detector.virtual_key"
LOOP_FEATURE = "loop_detector.feature"

# GenAI operations
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"

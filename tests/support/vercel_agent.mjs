// A tool-calling agent on the Vercel AI SDK (`ai`), its OpenAI provider against the local stub, with the SDK's own
// telemetry (experimental_telemetry) exported by the OpenTelemetry JS SDK over OTLP/HTTP (protobuf).
//
//   node tests/support/vercel_agent.mjs '{"otlp": "http://127.0.0.1:4318", "openai_base_url": ".../v1",
//                                         "tools": [...], "agents": [{"session", "scenario", "steps"}]}'
//
// Run by tests/ingest/test_frameworks.py from a node_modules it installs once (NODE_PATH). Each agent run is one
// generateText call (its `ai.generateText` span is the trace's root) with the session in the telemetry metadata
// (`ai.telemetry.metadata.sessionId`). Prints one JSON line: per agent, its trace id.
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH.split(":")[0] + "/");
const { generateText, jsonSchema, stepCountIs, tool } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");
const { BasicTracerProvider, BatchSpanProcessor } = require("@opentelemetry/sdk-trace-base");
const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-proto");
const { context, trace } = require("@opentelemetry/api");
const { AsyncLocalStorageContextManager } = require("@opentelemetry/context-async-hooks");

const config = JSON.parse(process.argv[2]);
const roots = [];
const rootRecorder = {  // the trace id of each run: its root span's
  onStart(span) { if (span.name === "ai.generateText") roots.push(span.spanContext().traceId); },
  onEnd() {}, forceFlush() { return Promise.resolve(); }, shutdown() { return Promise.resolve(); },
};
const provider = new BasicTracerProvider({
  spanProcessors: [rootRecorder, new BatchSpanProcessor(new OTLPTraceExporter({ url: config.otlp + "/v1/traces" }),
                                                        { scheduledDelayMillis: 200 })],
});
trace.setGlobalTracerProvider(provider);
// what NodeSDK / @vercel/otel register: spans of one async call chain share their trace
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const openai = createOpenAI({ baseURL: config.openai_base_url, apiKey: "sk-stub" });
const model = openai.chat("gpt-4o-mini");  // the Chat Completions API (what the stub serves)

function tools(scenario) {
  const out = {};
  config.tools.forEach((schema) => {
    const f = schema.function;
    let step = 0;
    out[f.name] = tool({
      description: f.description, inputSchema: jsonSchema(f.parameters),
      execute: async (args) => scenario === "loop" ? "port: 8080\nhost: 0.0.0.0\n"
        : `ok: ${f.name} ${JSON.stringify(args)} gave result number ${step++}`,
    });
  });
  return out;
}

const runs = [];
for (const agent of config.agents) {
  const before = roots.length;
  let errors = 0;
  try {
    await generateText({
      model, maxRetries: 0, system: `You are a coding agent. [${agent.scenario}]`,
      prompt: agent.scenario === "loop" ? "Fix the failing build." : "Add a --verbose flag.",
      tools: tools(agent.scenario), stopWhen: stepCountIs(agent.steps),
      experimental_telemetry: { isEnabled: true, functionId: `${agent.scenario}-agent`,
                                metadata: { sessionId: agent.session } },
    });
  } catch (e) {
    errors += 1;
  }
  runs.push({ session: agent.session, scenario: agent.scenario, trace_id: roots[before], errors });
}
await provider.forceFlush();
await provider.shutdown();
const pkg = (name) => require(name + "/package.json").version;
console.log(JSON.stringify({ agents: runs, versions: { ai: pkg("ai"), "@ai-sdk/openai": pkg("@ai-sdk/openai") } }));

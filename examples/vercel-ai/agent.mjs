// A Vercel AI SDK agent guarded by loop-detector's TypeScript SDK.
//
//   (cd sdk/typescript && npm ci)                     # builds the SDK
//   loop-detector serve &                             # API :8080 (or LOOP_DETECTOR_URL)
//   python examples/openai_stub.py --port 8765 &      # a stub model (or OPENAI_BASE_URL=https://api.openai.com/v1)
//   cd examples/vercel-ai && npm install && node agent.mjs
//
// `loopGuardMiddleware` asks loop-detector before every model call (the prompt's fingerprint as `pending`;
// inject goes into the system message, throttle waits, block throws); `guardTools` asks before every tool
// execution, and the `loopBlocked` stop condition ends the run on a refused tool call. The stub model asks for
// read_file("config.yaml") again and again: the third identical call is refused before it runs.
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, tool, wrapLanguageModel } from 'ai';
import { LoopGuard } from 'loop-detector-sdk';
import { blockedIn, guardTools, loopBlocked, loopGuardMiddleware } from 'loop-detector-sdk/vercel-ai';

const guard = new LoopGuard({ endpoint: process.env.LOOP_DETECTOR_URL ?? 'http://127.0.0.1:8080' });
const sessionId = process.env.LOOP_DETECTOR_SESSION ?? `vercel-ai-${Math.random().toString(16).slice(2, 8)}`;
const provider = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL ?? 'http://127.0.0.1:8765/v1',
  apiKey: process.env.OPENAI_API_KEY ?? 'sk-stub' });

const model = wrapLanguageModel({ model: provider.chat('gpt-4o-mini'), middleware: loopGuardMiddleware({ guard, sessionId }) });
const tools = guardTools({
  read_file: tool({
    description: 'Read a file of the repository',
    inputSchema: jsonSchema({ type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }),
    execute: async ({ path }) => {
      console.log(`  tool  read_file(${JSON.stringify(path)})`);
      return 'port: 8080';
    },
  }),
}, { guard, sessionId });

console.log(`session ${sessionId}`);
const result = await generateText({
  model, tools, maxRetries: 0,
  system: 'You fix configs. [loop]',
  prompt: 'Fix the failing config.',
  stopWhen: [stepCountIs(10), loopBlocked],
});
const blocked = blockedIn(result.steps);
console.log(blocked ? `blocked by loop-detector: ${JSON.stringify(blocked.body)}` : `done: ${result.text}`);

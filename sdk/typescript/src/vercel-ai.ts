/**
 * The Vercel AI SDK (`ai`): a language model middleware that asks loop-detector before every model call
 * made by `generateText`, `streamText`, `generateObject`, `streamObject` and agents, and a wrapper for
 * tools that asks before every tool execution.
 *
 *     import { wrapLanguageModel, generateText } from 'ai';
 *     import { LoopGuard } from 'loop-detector-sdk';
 *     import { loopGuardMiddleware, guardTools } from 'loop-detector-sdk/vercel-ai';
 *
 *     const guard = new LoopGuard({ endpoint: 'http://127.0.0.1:8080' });
 *     const model = wrapLanguageModel({ model: openai('gpt-4o-mini'), middleware: loopGuardMiddleware({ guard, sessionId: 'run-42' }) });
 *     await generateText({ model, prompt: 'Fix the build.', tools: guardTools(tools, { guard, sessionId: 'run-42' }),
 *                          stopWhen: [stepCountIs(20), loopBlocked] });
 *
 * Before each call the middleware sends the fingerprint of the model id and the prompt as `pending` (an
 * exact repeat is refused before it is sent), with the app's fingerprints of the call (`pending.evidence`: the
 * request and what the agent just observed, the tool results and user message since the last call; hashes,
 * never the text), and applies the decision: block throws `LoopBlockedError`
 * (from `generateText`; `streamText` reports it to `onError` and as the stream's error), throttle waits,
 * inject adds the break instruction to the system message of the prompt. A tool call refused by `guardTools`
 * does not run; the AI SDK turns the `LoopBlockedError` into the step's `tool-error` (the model would see
 * it), so add the `loopBlocked` stop condition to end the run on that step. It imports nothing from `ai`:
 * the middleware is a plain object of the shape `wrapLanguageModel` takes (`specificationVersion` 'v3' for
 * ai 6, the default; 'v2' for ai 5; 'v4' for ai 7).
 */

import type { CheckIds, LoopGuard } from './client.js';
import { modelCallEvidence } from './evidence/fingerprints.js';
import { fromVercelPrompt } from './evidence/messages.js';
import { type Pending, pendingRequest, pendingTool } from './fingerprint.js';
import { type Position, withInstruction } from './instruction.js';
import { LoopBlockedError } from './models.js';

/** The parts of the AI SDK's call options this middleware reads (`LanguageModelV2/V3/V4CallOptions`). */
export interface CallOptionsLike {
  prompt: Array<{ role: string; content: unknown }>;
  providerOptions?: Record<string, Record<string, unknown> | undefined>;
  [key: string]: unknown;
}

export interface ModelLike {
  modelId: string;
  provider?: string;
}

/** The ids of a call: fixed, or computed from the call's options. */
export type IdsOption = CheckIds | ((params: CallOptionsLike) => CheckIds);

export interface LoopGuardMiddlewareOptions {
  guard: LoopGuard;
  /** the ids of every call (or use `ids`); `providerOptions.loopDetector` of a call overrides them */
  sessionId?: string;
  traceId?: string;
  virtualKey?: string;
  feature?: string;
  ids?: IdsOption;
  /** where the break instruction goes in the system message (default: appended) */
  position?: Position;
  /** 'v3' (ai 6, default), 'v2' (ai 5), 'v4' (ai 7) */
  specificationVersion?: 'v2' | 'v3' | 'v4';
}

export interface LoopGuardMiddleware<P extends CallOptionsLike = CallOptionsLike> {
  readonly specificationVersion: 'v2' | 'v3' | 'v4';
  readonly middlewareVersion?: 'v2';
  transformParams(options: { type: 'generate' | 'stream'; params: P; model: ModelLike }): Promise<P>;
}

function resolveIds(options: LoopGuardMiddlewareOptions, params?: CallOptionsLike): CheckIds {
  const base: Partial<CheckIds> = {
    sessionId: options.sessionId, traceId: options.traceId, virtualKey: options.virtualKey, feature: options.feature,
  };
  const computed = typeof options.ids === 'function' ? (params ? options.ids(params) : undefined) : options.ids;
  const perCall = (params?.providerOptions?.loopDetector ?? {}) as Partial<CheckIds>;
  const ids = { ...base, ...(computed ?? {}), ...perCall };
  for (const k of Object.keys(ids) as Array<keyof CheckIds>) if (!ids[k]) delete ids[k];
  return ids as CheckIds;
}

/** A `wrapLanguageModel` middleware: check (with the prompt's fingerprint) before every model call. */
export function loopGuardMiddleware<P extends CallOptionsLike = CallOptionsLike>(
  options: LoopGuardMiddlewareOptions,
): LoopGuardMiddleware<P> {
  const version = options.specificationVersion ?? 'v3';
  return {
    specificationVersion: version,
    ...(version === 'v2' ? { middlewareVersion: 'v2' as const } : {}),
    async transformParams({ params, model }) {
      const ids = resolveIds(options, params);
      const pending: Pending = pendingRequest(model.modelId, params.prompt);
      try {
        pending.evidence = modelCallEvidence(model.modelId, fromVercelPrompt(params.prompt));
      } catch {
        // a prompt of a shape no fingerprint can be made of: the check goes without (never its failure)
      }
      const instruction = await options.guard.beforeCall({ ...ids, pending });
      if (!instruction) return params;
      return { ...params, prompt: withInstruction(params.prompt, instruction, options.position) };
    },
  };
}

/** A tool of the AI SDK's shape (`tool({...})`): only `execute` is wrapped. */
export interface ToolLike {
  execute?: (input: never, options: never) => unknown;
  [key: string]: unknown;
}

export interface GuardToolsOptions {
  guard: LoopGuard;
  sessionId?: string;
  traceId?: string;
  virtualKey?: string;
  feature?: string;
  ids?: CheckIds | (() => CheckIds);
}

/**
 * The same tools, each `execute` checked first with the tool's name and the fingerprints of its input as
 * `pending` (the same tool call back to back is refused before it runs; the input itself is not sent); throws
 * `LoopBlockedError` on block, waits on throttle.
 */
export function guardTools<T extends Record<string, ToolLike>>(tools: T, options: GuardToolsOptions): T {
  const out: Record<string, ToolLike> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute as ((input: unknown, opts: unknown) => unknown) | undefined;
    if (typeof execute !== 'function') {
      out[name] = tool;
      continue;
    }
    out[name] = {
      ...tool,
      execute: async (input: unknown, opts: unknown) => {
        const computed = typeof options.ids === 'function' ? options.ids() : options.ids;
        const ids = resolveIds({ ...options, ids: computed });
        await options.guard.beforeCall({ ...ids, pending: pendingTool(name, input) });
        return execute.call(tool, input, opts);
      },
    };
  }
  return out as T;
}

/** The parts of a step this stop condition reads (`StepResult` of `generateText` / `streamText`). */
export interface StepLike {
  content: ReadonlyArray<{ type: string; error?: unknown }>;
}

/**
 * A `stopWhen` condition: stop the run after a step in which loop-detector refused a tool call (a
 * `tool-error` whose error is a `LoopBlockedError`). `blockedIn(steps)` returns that error.
 */
export function loopBlocked({ steps }: { steps: ReadonlyArray<StepLike> }): boolean {
  return blockedIn(steps) !== undefined;
}

/** The `LoopBlockedError` of the first refused tool call in these steps, if any. */
export function blockedIn(steps: ReadonlyArray<StepLike>): LoopBlockedError | undefined {
  for (const step of steps) {
    for (const part of step.content) {
      if (part.type === 'tool-error' && part.error instanceof LoopBlockedError) return part.error;
    }
  }
  return undefined;
}

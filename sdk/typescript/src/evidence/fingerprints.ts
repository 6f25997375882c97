/**
 * The app's fingerprints of a call, version 3: what the service computes from content, computed where the
 * content is (the Python SDK's `loop_detector_sdk.evidence.fingerprints` documents the set and the columns of
 * `otel.genai_calls` each stands for). Hashes are `bigint`; on the wire, decimal strings.
 */

import { cityHash64, combine, hashPairs, hashStrings, intHash, ngramSimhashCI, utf8, wordShingleSimhashCI }
  from './clickhouse-hash.js';
import { objectPairs } from './clickhouse-json.js';
import { argumentsText, type Message, type Part, TOOL_CALL } from './messages.js';
import { digitsMasked, isAck, isEmptyObservation, isFailed, isPending, normalize, withoutKeys } from './normalize.js';

export const VERSION = 3;
const SYSTEM_ROLES = new Set(['system', 'developer']);

export interface Observation {
  fp: bigint;
  simhash: bigint;
  empty: boolean;
  chars: number;
  failed: boolean;
  shape: bigint;
  pending: boolean;
  ack: boolean;
}

export interface Reply {
  fp: bigint;
  simhash: bigint;
}

export interface ToolCallEvidence {
  name: string;
  fp: bigint;
  simhash: bigint;
}

export interface ToolRunEvidence {
  fp: bigint;
  argsFp: bigint;
  argsSimhash: bigint;
}

/** The new input of a call, captured (an empty text included: an empty result is an outcome of its own, the same
 * every time, and "nothing"): observation_fp, observation_simhash, observation_empty, observation_chars,
 * observation_failed, observation_shape_fp, observation_pending, observation_ack. */
export function observation(text: string): Observation {
  const norm = normalize(text);
  const stripped = normalize(withoutKeys(text));
  const empty = norm === '' || isEmptyObservation(text);
  const failed = isFailed(text);
  const pending = isPending(text, failed);
  return {
    fp: cityHash64(utf8(norm)),
    simhash: stripped ? wordShingleSimhashCI(stripped) : 0n,
    empty,
    chars: utf8(norm).length,
    failed,
    // a failure's (or "nothing"'s) key: read only for those, computed only for those
    shape: failed || empty ? cityHash64(utf8(digitsMasked(norm))) : 0n,
    pending,
    ack: isAck(text, pending),
  };
}

/** The model's text: output_fp, output_norm_simhash. */
export function reply(text: string): Reply {
  const norm = normalize(text);
  return { fp: norm ? cityHash64(utf8(norm)) : 0n, simhash: norm ? ngramSimhashCI(norm) : 0n };
}

function toolFp(name: string, args: string): bigint {
  const pairs = objectPairs(args);
  if (pairs === undefined) return hashPairs(utf8(name), [], utf8(args));
  return hashPairs(utf8(name), pairs.map(([k, v]) => [utf8(k), utf8(v)] as const), utf8(''));
}

/** A tool call the model asked for (`args` as the span holds them): out_tool_fps, out_tool_arg_simhashes. */
export function toolCall(name: string, args: string): ToolCallEvidence {
  return { name, fp: toolFp(name, args), simhash: args ? ngramSimhashCI(digitsMasked(args)) : 0n };
}

/** A tool about to run: its execute_tool span's tool_fp, args_fp, args_simhash. */
export function toolRun(name: string, args: string): ToolRunEvidence {
  const norm = normalize(args);
  return {
    fp: toolFp(name, args),
    argsFp: name && norm ? hashStrings(utf8(name), utf8(norm)) : 0n,
    argsSimhash: name && norm ? ngramSimhashCI(digitsMasked(norm)) : 0n,
  };
}

function partFp(p: Part): bigint {
  if (p.kind === TOOL_CALL) return toolCall(p.name, p.arguments).fp;
  return hashStrings(utf8(p.kind), utf8(p.text));
}

/** `cityHash64(model, [cityHash64(role, [part fingerprint, ...]), ...])`. */
export function requestFp(model: string | null | undefined, messages: Message[]): bigint {
  let h = combine(cityHash64(utf8(model ?? '')), intHash(messages.length));
  for (const m of messages) {
    let mh = combine(cityHash64(utf8(m.role)), intHash(m.parts.length));
    for (const p of m.parts) mh = combine(mh, intHash(partFp(p)));
    h = combine(h, intHash(mh));
  }
  return h;
}

/** The text of the messages after the model's last one (system messages left out); undefined when none, or none has
 * a part (nothing was captured); '' when what came is empty (a tool's empty response: an outcome). */
export function newInputText(messages: Message[]): string | undefined {
  let start = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === 'assistant') {
      start = i + 1;
      break;
    }
  }
  const fresh = messages.slice(start).filter((m) => !SYSTEM_ROLES.has(m.role));
  if (!fresh.some((m) => m.parts.length > 0)) return undefined;
  return fresh.map((m) => m.parts.map((p) => p.text).join(' ')).join(' ');
}

/** `pending.evidence` of a check before a model call: its request and new input. */
export interface ModelCallEvidence {
  version: 3;
  request: string;
  input?: string;
  input_simhash?: string;
  input_empty?: boolean;
  input_chars?: number;
  input_failed?: boolean;
  input_shape?: string;
  input_pending?: boolean;
  input_ack?: boolean;
}

/** `pending.evidence` of a check before a tool runs. */
export interface ToolEvidence {
  version: 3;
  tool: string;
  tool_args: string;
  tool_args_simhash: string;
}

export type PendingEvidence = ModelCallEvidence | ToolEvidence;

export function modelCallEvidence(model: string | null | undefined, messages: Message[]): ModelCallEvidence {
  const out: ModelCallEvidence = { version: VERSION, request: requestFp(model, messages).toString() };
  const text = newInputText(messages);
  if (text !== undefined) {
    const o = observation(text);
    out.input = o.fp.toString();
    out.input_simhash = o.simhash.toString();
    out.input_empty = o.empty;
    out.input_chars = o.chars;
    out.input_failed = o.failed;
    out.input_shape = o.shape.toString();
    out.input_pending = o.pending;
    out.input_ack = o.ack;
  }
  return out;
}

export function toolRunEvidence(name: string, args: unknown): ToolEvidence {
  const run = toolRun(name, args === undefined || args === null ? '' : argumentsText(args));
  return { version: VERSION, tool: run.fp.toString(), tool_args: run.argsFp.toString(),
           tool_args_simhash: run.argsSimhash.toString() };
}

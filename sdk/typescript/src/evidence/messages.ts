/**
 * The messages of a model call in one neutral form, as the Python SDK's `loop_detector_sdk.evidence.messages`:
 * a role and parts, each part carrying the text the service reads from it (a text part's content, a tool result's
 * response, raw JSON when that is not a string) or a tool call's name and arguments as the span holds them.
 * Converters: `fromSemconv` (GenAI semantic-conventions messages, `{role, parts: [{type, content | response |
 * name, arguments}]}`: the shared test vectors) and `fromVercelPrompt` (the AI SDK's language model prompt).
 */

import { documentRaw, valueRaw } from './clickhouse-json.js';

export interface Part {
  /** the part type: `text`, `tool_call`, `tool_call_response`, `reasoning`... */
  kind: string;
  text: string;
  name: string;
  arguments: string;
}

export interface Message {
  role: string;
  parts: Part[];
}

export const TOOL_CALL = 'tool_call';
export const TOOL_RESULT = 'tool_call_response';

function part(kind: string, text = '', name = '', args = ''): Part {
  return { kind, text, name, arguments: args };
}

type Obj = Record<string, unknown>;

function isObj(x: unknown): x is Obj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** A tool result: the string, or the raw JSON of anything else. */
function resultText(value: unknown): string {
  return typeof value === 'string' ? value : valueRaw(value ?? null);
}

/**
 * Tool call arguments as the span holds them: a JSON string as ClickHouse re-serializes it, any other value's raw
 * JSON, a string that is not JSON as it is.
 */
export function argumentsText(value: unknown): string {
  if (typeof value === 'string') return documentRaw(value) ?? value;
  return valueRaw(value ?? null);
}

/** GenAI semantic-conventions messages (what `gen_ai.input.messages` holds). */
export function fromSemconv(messages: unknown): Message[] {
  const out: Message[] = [];
  for (const m of Array.isArray(messages) ? messages : []) {
    if (!isObj(m)) continue;
    const parts: Part[] = [];
    for (const p of Array.isArray(m.parts) ? m.parts : []) {
      if (!isObj(p)) continue;
      const kind = typeof p.type === 'string' ? p.type : '';
      if (kind === TOOL_CALL) {
        parts.push(part(TOOL_CALL, '', String(p.name ?? ''),
          typeof p.arguments === 'string' ? p.arguments : valueRaw(p.arguments ?? null)));
      } else if (kind === TOOL_RESULT) {
        parts.push(part(TOOL_RESULT, resultText(p.response)));
      } else {
        parts.push(part(kind, typeof p.content === 'string' ? p.content : ''));
      }
    }
    out.push({ role: String(m.role ?? ''), parts });
  }
  return out;
}

/** The model's own text: every part's content, non-empty ones joined by a space (tool calls have none). */
export function replyText(outputs: Message[]): string {
  const texts: string[] = [];
  for (const m of outputs) for (const p of m.parts) if (p.kind !== TOOL_RESULT && p.text) texts.push(p.text);
  return texts.join(' ');
}

function vercelParts(content: unknown): Part[] {
  if (typeof content === 'string') return [part('text', content)];
  const parts: Part[] = [];
  for (const p of Array.isArray(content) ? content : []) {
    if (!isObj(p)) continue;
    if (p.type === 'text' || p.type === 'reasoning') {
      parts.push(part(p.type, typeof p.text === 'string' ? p.text : ''));
    } else if (p.type === 'tool-call') {
      parts.push(part(TOOL_CALL, '', String(p.toolName ?? ''), argumentsText(p.input ?? p.args)));
    } else if (p.type === 'tool-result') {
      const output = p.output;
      // AI SDK 5+: output {type, value}; older: result
      const value = isObj(output) && 'value' in output ? output.value : (output ?? p.result);
      parts.push(part(TOOL_RESULT, resultText(value)));
    } else {
      parts.push(part(String(p.type ?? '')));
    }
  }
  return parts;
}

/** The AI SDK's language model prompt (`LanguageModelV2/V3/V4Prompt`): system, user, assistant and tool messages. */
export function fromVercelPrompt(prompt: unknown): Message[] {
  const out: Message[] = [];
  for (const m of Array.isArray(prompt) ? prompt : []) {
    if (!isObj(m)) continue;
    out.push({ role: String(m.role ?? ''), parts: vercelParts(m.content) });
  }
  return out;
}

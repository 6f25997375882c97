/** Putting the break instruction (an `inject` decision) into the prompt of the call about to be made. */

export type Position = 'append' | 'prepend';

const SYSTEM_ROLES = new Set(['system', 'developer']);

interface MessageLike {
  role?: unknown;
  content?: unknown;
  [key: string]: unknown;
}

/**
 * A copy of `messages` with `instruction` added to the first system (or developer) message, or a new
 * system message first when there is none. Works for OpenAI-style chat messages and for the AI SDK's
 * prompt (whose system message content is a string). The caller's array and objects are not modified.
 */
export function withInstruction<T>(messages: readonly T[] | null | undefined, instruction: string,
                                   position: Position = 'append'): T[] {
  const out = [...(messages ?? [])];
  for (let i = 0; i < out.length; i++) {
    const message = out[i] as unknown as MessageLike;
    if (!message || typeof message !== 'object' || !SYSTEM_ROLES.has(message.role as string)) continue;
    const content = message.content;
    if (typeof content === 'string' || content === undefined || content === null) {
      const text = (content as string | null | undefined) ?? '';
      const joined = position === 'append' ? `${text}\n\n${instruction}` : `${instruction}\n\n${text}`;
      out[i] = { ...message, content: joined.trim() } as unknown as T;
    } else if (Array.isArray(content)) {
      const part = { type: 'text', text: instruction };
      out[i] = { ...message, content: position === 'append' ? [...content, part] : [part, ...content] } as unknown as T;
    } else {
      continue;
    }
    return out;
  }
  return [{ role: 'system', content: instruction } as unknown as T, ...out];
}

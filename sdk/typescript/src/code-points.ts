/** Strings in Unicode code point order: Python's `str` order, and the byte order of UTF-8. */

/** Compare two strings by Unicode code point (Python's `str` order). */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  if (i === n) return a.length - b.length;
  // step back onto a shared high surrogate, so that both sides are read as whole code points
  const prev = i > 0 ? a.charCodeAt(i - 1) : 0;
  if (prev >= 0xd800 && prev <= 0xdbff) i--;
  return (a.codePointAt(i) as number) - (b.codePointAt(i) as number);
}

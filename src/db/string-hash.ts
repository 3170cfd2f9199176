/**
 * FNV-1a over a string's UTF-16 code units, as a signed 32-bit integer: cheap, not for secrets or hostile
 * collisions.
 */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash;
}

/**
 * What a caller gave (an id, a query value), as it is quoted back in an error
 * or a note: past ECHO_ID_CHARS characters, cut, with its full size in bytes,
 * so a 10 KB id makes a one-line message, not a screenful, and two long ids
 * that differ early still read apart.
 */
export const ECHO_ID_CHARS = 64;

/** In a line of text: JSON-quoted (control characters escaped), the size after the quotes. */
export function echoId(id: string): string {
  const head = headOf(id);
  return head === undefined ? JSON.stringify(id) : `${JSON.stringify(head)}… (${Buffer.byteLength(id)} bytes)`;
}

/** As a JSON string value (a 422's `input`): the size inside it. */
export function clipEchoed(value: string): string {
  const head = headOf(value);
  return head === undefined ? value : `${head}… (${Buffer.byteLength(value)} bytes)`;
}

/** The first ECHO_ID_CHARS characters (never half a surrogate pair), or undefined when that is all of it. */
function headOf(text: string): string | undefined {
  let head = '';
  let count = 0;
  for (const char of text) {
    if (count === ECHO_ID_CHARS) return head;
    head += char;
    count += 1;
  }
  return undefined;
}

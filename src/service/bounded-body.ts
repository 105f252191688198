/**
 * Reads a response body as bytes, but stops at `maxBytes`: a body that
 * grows past it is destroyed (the connection is dropped) instead of being
 * buffered, so one oversized or endless answer cannot take the process's
 * memory with it.
 */
import type { Readable } from 'node:stream';

export type BoundedBody = { ok: true; bytes: Buffer } | { ok: false; tooLarge: true };

export async function readBoundedBody(body: Readable, maxBytes: number): Promise<BoundedBody> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      body.destroy();
      return { ok: false, tooLarge: true };
    }
    chunks.push(chunk);
  }
  // Decoded by the caller, once, from the whole: a multi-byte character may straddle two chunks.
  return { ok: true, bytes: chunks.length === 1 && chunks[0] !== undefined ? chunks[0] : Buffer.concat(chunks, size) };
}

/**
 * Reads a response body as UTF-8 text, but stops at `maxBytes`: a body that
 * grows past it is destroyed (the connection is dropped) instead of being
 * buffered, so one oversized or endless answer cannot take the process's
 * memory with it.
 */
import type { Readable } from 'node:stream';

export type BoundedBody = { ok: true; text: string } | { ok: false; tooLarge: true };

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
  // Decoded once at the end: a multi-byte character may straddle two chunks.
  return { ok: true, text: Buffer.concat(chunks, size).toString('utf8') };
}

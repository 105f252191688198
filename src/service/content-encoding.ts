/**
 * Compressed responses. The client asks for what Node's zlib decodes
 * (`gzip`, `br`, and `zstd` where this Node has it) and decodes what comes
 * back as it streams in, so that the body's size limit (SYNC_MAX_PAGE_BYTES)
 * bounds the *decoded* bytes: a small body that inflates without end (a
 * decompression bomb) is cut off like any body that is too large. Every
 * later step (the record spans, the content hashes, `users.raw`) sees the
 * decoded bytes, as if nothing had been compressed.
 *
 * A list page of 500 users is ~408 KB of JSON and ~49 KB gzipped: against a
 * service across the internet, the bytes on the wire are most of a re-sync.
 * The official SDK's `fetch` asks for compression by itself.
 */
import { pipeline, type Readable } from 'node:stream';
import * as zlib from 'node:zlib';

type Decoder = () => NodeJS.ReadWriteStream;

/** zstd came to node:zlib in 22.15; feature-tested, not assumed. */
const zstd: Decoder | undefined =
  typeof (zlib as { createZstdDecompress?: unknown }).createZstdDecompress === 'function'
    ? () => (zlib as unknown as { createZstdDecompress: () => NodeJS.ReadWriteStream }).createZstdDecompress()
    : undefined;

const DECODERS: Readonly<Record<string, Decoder>> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  br: () => zlib.createBrotliDecompress(),
  // Not asked for, but a server may send it anyway: tolerated, as the rest of the response is.
  deflate: () => zlib.createInflate(),
  ...(zstd === undefined ? {} : { zstd }),
};

/** The request's `accept-encoding`: what the client can decode, best first. */
export const ACCEPT_ENCODING = zstd === undefined ? 'gzip, br' : 'gzip, br, zstd';

/** A Content-Encoding the client cannot decode; the message names it. */
export class UnsupportedEncodingError extends Error {
  override name = 'UnsupportedEncodingError';
}

/**
 * The codings a Content-Encoding header lists, in the order they were
 * applied (`identity` dropped); throws UnsupportedEncodingError for one the
 * client cannot decode.
 */
export function codingsOf(header: string | string[] | undefined): string[] {
  const text = Array.isArray(header) ? header.join(',') : (header ?? '');
  const codings = text
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  for (const c of codings) {
    if (DECODERS[c] === undefined) {
      throw new UnsupportedEncodingError(`Content-Encoding '${c}' is not one this client asked for or can decode (${ACCEPT_ENCODING})`);
    }
  }
  return codings;
}

/**
 * `body` decoded as `codings` say (codingsOf), streaming: the last applied
 * is undone first. A stream that is not what its coding says fails with
 * zlib's error (`code` Z_DATA_ERROR and the like), which isDecodingError tells.
 */
export function decodedBody(body: Readable, codings: readonly string[]): Readable {
  if (codings.length === 0) return body;
  const stages = [...codings].reverse().map((c) => (DECODERS[c] as Decoder)());
  const last = stages.at(-1) as unknown as Readable;
  pipeline([body, ...stages] as unknown as [Readable, ...NodeJS.ReadWriteStream[]], () => {
    // Errors reach the reader through `last`, which pipeline destroys with them.
  });
  return last;
}

/** zlib's errors for a body that is not what its Content-Encoding says. */
export function isDecodingError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('Z_') || code.startsWith('ERR_BROTLI') || code.startsWith('ERR_ZSTD'));
}

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
 *
 * Not undici's `interceptors.decompress` (checked in undici 8.13): it passes a
 * coding it does not know through undecoded and decodes `deflate`, which this
 * client did not offer, where this client refuses both by name; and its
 * `maxSize` is one limit per dispatcher that fails the answer, where this
 * client bounds each answer by what it carries (a page, a record, an error's
 * detail, whose head it keeps: ./body-bounds.ts).
 */
import { pipeline, type Readable } from 'node:stream';
import * as zlib from 'node:zlib';

type Decoder = () => NodeJS.ReadWriteStream;

/** zstd came to node:zlib in 22.15; feature-tested, not assumed. */
const zstd: Decoder | undefined =
  typeof (zlib as { createZstdDecompress?: unknown }).createZstdDecompress === 'function'
    ? () => (zlib as unknown as { createZstdDecompress: () => NodeJS.ReadWriteStream }).createZstdDecompress()
    : undefined;

/**
 * Exactly the codings the client asks for (`x-gzip` is gzip's old name,
 * RFC 9110 8.4.1.3). Nothing else is decoded, though zlib could: a coding
 * the request did not offer (a bare `deflate`, say) means something between
 * the client and the service rewrote the answer against the request, and
 * the client refuses it, named as such, rather than guess what else that
 * intermediary changed (docs/service-notes.md).
 */
const DECODERS: Readonly<Record<string, Decoder>> = {
  gzip: () => zlib.createGunzip(),
  'x-gzip': () => zlib.createGunzip(),
  br: () => zlib.createBrotliDecompress(),
  ...(zstd === undefined ? {} : { zstd }),
};

/** Codings zlib knows but the client does not offer: refused as "not asked for" rather than "unknown". */
const NOT_OFFERED = new Set(['deflate', 'x-deflate', ...(zstd === undefined ? ['zstd'] : [])]);

/** The request's `accept-encoding`: what the client can decode, best first. */
export const ACCEPT_ENCODING = zstd === undefined ? 'gzip, br' : 'gzip, br, zstd';

/** A Content-Encoding the client did not ask for or cannot decode; the message names it and says which. */
export class UnsupportedEncodingError extends Error {
  override name = 'UnsupportedEncodingError';
}

/**
 * The codings a Content-Encoding header lists, in the order they were
 * applied (`identity` dropped); throws UnsupportedEncodingError for one the
 * client did not ask for. The caller then still owns the response body and
 * must destroy it (client.ts does, on every path).
 */
export function codingsOf(header: string | string[] | undefined): string[] {
  const text = Array.isArray(header) ? header.join(',') : (header ?? '');
  const codings = text
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  for (const c of codings) {
    if (DECODERS[c] !== undefined) continue;
    const printable = c.length > 40 ? `${c.slice(0, 40)}…` : c;
    throw new UnsupportedEncodingError(
      NOT_OFFERED.has(c)
        ? `Content-Encoding '${printable}' was not asked for (accept-encoding: ${ACCEPT_ENCODING}); refused`
        : `Content-Encoding '${printable}' is not one this client can decode (accept-encoding: ${ACCEPT_ENCODING}); refused`,
    );
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

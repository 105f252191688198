/**
 * How much of an answer's body is read: a bound fitted to what the body
 * carries (a page, one record, an error's detail), applied to the *decoded*
 * bytes as they stream in, and the body read to its end or destroyed on
 * every path. Used by ./client.ts for every request it makes.
 *
 * Why every path: a body neither read nor destroyed holds its connection,
 * and the pool's close then waits for it for ever. A sync process that
 * closed its client after a refused Content-Encoding so never exited
 * (issue 40).
 */
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { codingsOf, decodedBody, isDecodingError, UnsupportedEncodingError } from './content-encoding.js';
import { errorMessage } from '../runtime/line-text.js';

const DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024;
/**
 * A resolve answer is one user record: ~0.8 KB typical (a page of 500 is
 * ~400 KB), ~25 KB for a user with a hundred connected sources. 256 KiB is
 * ten times that, and keeps SYNC_VERIFY_CONCURRENCY checks in flight (256 at
 * most) to 64 MiB of bodies at worst, where the page bound would allow 8 GiB.
 */
export const DEFAULT_MAX_RECORD_BODY_BYTES = 256 * 1024;
/**
 * What is kept of a body that is not the answer asked for (an error's, a
 * removal's unspecified 200): its detail, or a proxy's HTML page, is read
 * for a message only, so a longer one is cut here and the status stands.
 */
const DETAIL_BODY_BYTES = 64 * 1024;

/**
 * The size bound of one answer's decoded body. `setting` names the variable
 * that sets it; `keepHead`: past the bound, keep the head and the status
 * (an answer read for its status and a message) instead of failing.
 */
export interface BodyBound {
  bytes: number;
  setting: string | undefined;
  keepHead: boolean;
  /** Shared by the bodies of one kind, so that many in flight are not all read at once. */
  slots?: ReadSlots;
}

/**
 * What all resolve answers read at once may hold: SYNC_VERIFY_CONCURRENCY
 * checks (up to 256) at SYNC_MAX_RESOLVE_BYTES each would be 64 MiB, and a
 * bomb on every check took a `sync --once` to 279 MB at 256 in flight
 * (bench/check-bomb.ts). Past this budget a body waits its turn, its bytes
 * in the socket, not in this process.
 */
const RECORD_READS_BUDGET = 16 * 1024 * 1024;

/** At most `size` bodies read at once; the others wait for a slot. */
class ReadSlots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(size: number) {
    this.free = Math.max(1, Math.floor(size));
  }

  /** Resolves with the slot's release, to be called once. */
  async take(): Promise<() => void> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    return () => {
      const next = this.waiting.shift();
      if (next === undefined) this.free++;
      else next();
    };
  }
}

export const pageBound = (bytes = DEFAULT_MAX_BODY_BYTES): BodyBound => ({ bytes, setting: 'SYNC_MAX_PAGE_BYTES', keepHead: false });
/** One client's bound for its resolve answers: made once, its slots shared by all of them. */
export const recordBound = (bytes = DEFAULT_MAX_RECORD_BODY_BYTES): BodyBound => ({
  bytes,
  setting: 'SYNC_MAX_RESOLVE_BYTES',
  keepHead: false,
  slots: new ReadSlots(RECORD_READS_BUDGET / bytes),
});
/** A removal's 200 carries an unspecified body: read for the record, never a reason to fail a removal that happened. */
export const DETAIL_BOUND: BodyBound = { bytes: DETAIL_BODY_BYTES, setting: undefined, keepHead: true };

/** A body that is not the answer asked for (an error status) keeps only a head, whatever the answer would carry. */
export function fittedBound(bound: BodyBound, status: number): BodyBound {
  if (status >= 200 && status < 300) return bound;
  return { ...DETAIL_BOUND, bytes: Math.min(bound.bytes, DETAIL_BODY_BYTES) };
}

/**
 * A body the client cannot decode: a Content-Encoding it did not ask for, or
 * a body that is not what its Content-Encoding says. The message names the
 * coding (and zlib's complaint).
 */
export class BodyCodingError extends Error {
  override name = 'BodyCodingError';
}

/**
 * The response's body, decoded as its Content-Encoding says and cut at
 * `bound.bytes` decoded bytes. Throws BodyCodingError or the transport's
 * error (an abort, a reset); whichever way it
 * ends, what was not read is destroyed, and its connection with it.
 */
export async function readAnswerBody(response: Dispatcher.ResponseData, bound: BodyBound): Promise<BoundedBody> {
  let codings: string[] = [];
  const release = await bound.slots?.take();
  try {
    codings = response.headers['content-length'] === '0' ? [] : codingsOf(response.headers['content-encoding']);
    return await readBoundedBody(decodedBody(response.body, codings), bound.bytes, bound.keepHead);
  } catch (err) {
    if (err instanceof UnsupportedEncodingError) throw new BodyCodingError(err.message);
    if (isDecodingError(err)) throw new BodyCodingError(`body is not valid ${codings.join(', ')}: ${errorMessage(err)}`, { cause: err });
    throw err;
  } finally {
    dropUnread(response.body);
    release?.();
  }
}

/** A body read up to its bound: `tooLarge` when it grew past it (readBoundedBody). */
export type BoundedBody = { ok: true; bytes: Buffer } | { ok: false; tooLarge: true; bytes: Buffer };

/** Destroys a body not read to its end (its connection goes with it); one already ended or destroyed is left alone. */
function dropUnread(body: Readable): void {
  if (body.readableEnded || body.destroyed) return;
  // undici reports the abort it was asked for as an 'error' (UND_ERR_ABORTED): expected here, not a failure.
  body.on('error', () => undefined);
  body.destroy();
}

/**
 * Reads a response body as bytes, but stops at `maxBytes`: a body that
 * grows past it is destroyed (the connection is dropped) instead of being
 * buffered, so one oversized or endless answer cannot take the process's
 * memory with it. `bytes` of a body too large is its first `maxBytes` when
 * `keepHead`, else empty: a copy nobody reads is garbage that many checks
 * in flight pile up faster than it is collected (bench/check-bomb.ts).
 */
async function readBoundedBody(body: Readable, maxBytes: number, keepHead = false): Promise<BoundedBody> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    if (size + chunk.length > maxBytes) {
      body.destroy();
      if (!keepHead) return { ok: false, tooLarge: true, bytes: Buffer.alloc(0) };
      chunks.push(chunk.subarray(0, maxBytes - size));
      return { ok: false, tooLarge: true, bytes: Buffer.concat(chunks, maxBytes) };
    }
    size += chunk.length;
    chunks.push(chunk);
  }
  // Decoded by the caller, once, from the whole: a multi-byte character may straddle two chunks.
  return { ok: true, bytes: chunks.length === 1 && chunks[0] !== undefined ? chunks[0] : Buffer.concat(chunks, size) };
}

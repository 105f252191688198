/**
 * Putting an answer on the wire: whole, slowly in chunks, cut short after
 * the headers promised more, or not at all (connection reset).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SlowBody } from './faults.js';

export interface Reply {
  status: number;
  body: string | Buffer;
  contentType: string;
  headers?: Record<string, string>;
}

export type Delivery = { kind: 'whole' } | { kind: 'slow'; slow: SlowBody } | { kind: 'truncate' };

/** `body` as JSON; a string or Buffer is taken to be JSON text already. */
export function jsonReply(status: number, body: unknown, headers?: Record<string, string>): Reply {
  const text = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  return { status, body: text, contentType: 'application/json', headers };
}

/** `{"detail": "..."}`: the plain-string form upstream uses for non-validation errors. */
export function detailReply(status: number, detail: string, headers?: Record<string, string>): Reply {
  return jsonReply(status, { detail }, headers);
}

export async function deliver(res: ServerResponse, reply: Reply, delivery: Delivery, signal: AbortSignal): Promise<void> {
  const body = typeof reply.body === 'string' ? Buffer.from(reply.body) : reply.body;
  if (delivery.kind === 'truncate') return truncate(res, reply, body);
  res.writeHead(reply.status, headersFor(reply, body.length));
  if (delivery.kind === 'whole') {
    res.end(body);
    return;
  }
  await trickle(res, body, delivery.slow, signal);
}

/** Drops the connection without a byte of answer; an RST where the platform allows. */
export function resetConnection(req: IncomingMessage): void {
  const socket = req.socket;
  if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
  else socket.destroy();
}

function headersFor(reply: Reply, length: number): Record<string, string | number> {
  return { ...reply.headers, 'content-type': reply.contentType, 'content-length': length };
}

/** Promises the full length, sends about half, then closes: the client's body read must fail. */
function truncate(res: ServerResponse, reply: Reply, body: Buffer): Promise<void> {
  res.writeHead(reply.status, headersFor(reply, body.length + 1));
  return new Promise((resolve) => {
    res.write(body.subarray(0, Math.floor(body.length / 2)), () => {
      res.destroy();
      resolve();
    });
  });
}

async function trickle(res: ServerResponse, body: Buffer, slow: SlowBody, signal: AbortSignal): Promise<void> {
  try {
    for (let at = 0; at < body.length && !res.destroyed; at += slow.chunkBytes) {
      if (at > 0) await sleep(slow.chunkDelayMs, undefined, { signal });
      res.write(body.subarray(at, at + slow.chunkBytes));
    }
    res.end();
  } catch {
    res.destroy();
  }
}

/**
 * The replica's connection cap, so its clients cannot lock each other out.
 * Every open connection holds a file descriptor; without a cap, a thousand
 * connections that never finish their headers took all of a 1,024-descriptor
 * process and no other client was answered (the accept queue just waited).
 *
 * At the cap a new connection makes room by closing the connection that has
 * waited longest with no request in flight (an idle keep-alive one, or one
 * still sending its headers), if it has waited at least `graceMs`: a client
 * mid-request is never cut, and a slow or idle one gives way to a fresh one.
 * With none to close, the new connection is closed at once (refused): its
 * client sees a reset it can retry, instead of a hang in the accept queue.
 * Header and idle timeouts (./server.ts) bound how long any of them waits.
 */
import type { Socket } from 'node:net';

export type Shed = 'refused' | 'evicted';

export interface ConnectionGuardOptions {
  max: number;
  /** A connection that has waited less than this is not closed to make room. */
  graceMs: number;
  onShed(how: Shed): void;
  now?: () => number;
}

export class ConnectionGuard {
  /** Connections with no request in flight, by when they began to wait: oldest first (a Map keeps insertion order). */
  private readonly waiting = new Map<Socket, number>();
  /** Connections with requests in flight, and how many (pipelining). */
  private readonly busy = new Map<Socket, number>();
  private readonly now: () => number;

  constructor(private readonly options: ConnectionGuardOptions) {
    this.now = options.now ?? Date.now;
  }

  get open(): number {
    return this.waiting.size + this.busy.size;
  }

  /** A new connection: kept, making room if the cap is reached, or closed (refused). */
  admit(socket: Socket): void {
    if (this.open >= this.options.max && !this.makeRoom()) {
      socket.destroy();
      this.options.onShed('refused');
      return;
    }
    this.waiting.set(socket, this.now());
    socket.once('close', () => {
      this.waiting.delete(socket);
      this.busy.delete(socket);
    });
  }

  requestStarted(socket: Socket): void {
    if (this.waiting.delete(socket)) this.busy.set(socket, 1);
    else if (this.busy.has(socket)) this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
  }

  requestEnded(socket: Socket): void {
    const inFlight = (this.busy.get(socket) ?? 0) - 1;
    if (inFlight > 0) {
      this.busy.set(socket, inFlight);
      return;
    }
    if (!this.busy.delete(socket) || socket.destroyed) return;
    this.waiting.set(socket, this.now());
  }

  /** Whether `socket` has no request in flight (a raw error answer may then be written on it). */
  isWaiting(socket: Socket): boolean {
    return this.waiting.has(socket);
  }

  private makeRoom(): boolean {
    const oldest = this.waiting.entries().next();
    if (oldest.done === true) return false;
    const [socket, since] = oldest.value;
    if (this.now() - since < this.options.graceMs) return false;
    this.waiting.delete(socket);
    socket.destroy();
    this.options.onShed('evicted');
    return true;
  }
}

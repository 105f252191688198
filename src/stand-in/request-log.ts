/**
 * What the stand-in saw, for tests to assert on: a bounded log of recent
 * requests (which headers reached which endpoint — key isolation) and
 * counters per route and status.
 */
import type { IncomingHttpHeaders } from 'node:http';

export type RouteName = 'list' | 'resolve' | 'delete-member' | 'control' | 'unknown';

export interface RequestLogEntry {
  method: string;
  /** The raw path as received, percent-escapes intact, without the query. */
  path: string;
  /** The raw query string, without `?`. */
  query: string;
  /** Lowercased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  route: RouteName;
  /** Status sent; 0 when the connection was reset before any answer. */
  status: number;
  /** Set when an injected fault shaped the answer. */
  fault?: 'status' | 'reset' | 'truncate' | 'slow';
  durationMs: number;
}

export class RequestLog implements Iterable<RequestLogEntry> {
  private readonly ring: RequestLogEntry[] = [];
  private next = 0;

  constructor(readonly capacity = 10_000) {}

  push(entry: RequestLogEntry): void {
    if (this.ring.length < this.capacity) this.ring.push(entry);
    else this.ring[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
  }

  get length(): number {
    return this.ring.length;
  }

  /** Oldest first. */
  entries(): RequestLogEntry[] {
    if (this.ring.length < this.capacity) return [...this.ring];
    return [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
  }

  last(): RequestLogEntry | undefined {
    return this.ring[(this.next - 1 + this.ring.length) % Math.max(1, this.ring.length)];
  }

  clear(): void {
    this.ring.length = 0;
    this.next = 0;
  }

  [Symbol.iterator](): Iterator<RequestLogEntry> {
    return this.entries()[Symbol.iterator]();
  }
}

export class RouteCounts {
  private readonly counts = new Map<string, number>();

  increment(route: RouteName, status: number): void {
    const key = `${route} ${status}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  /** Requests to `route`, with `status` or with any status. */
  get(route: RouteName, status?: number): number {
    if (status !== undefined) return this.counts.get(`${route} ${status}`) ?? 0;
    let total = 0;
    for (const [key, n] of this.counts) if (key.startsWith(`${route} `)) total += n;
    return total;
  }

  /** `{"list 200": 12, "delete-member 404": 1, ...}` */
  snapshot(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  clear(): void {
    this.counts.clear();
  }
}

export function flattenHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/**
 * Fault injection: a plan (rates, latency, slow bodies, churn) plus a queue
 * of one-shot failures, turned into one decision per request. Decisions are
 * pure apart from the seeded PRNG and the queue, so a run with the same seed
 * and the same request sequence fails the same way.
 *
 * Timing of each fault relative to the work, on purpose:
 *   status (429/500/503/...)  before the request is handled: nothing happened
 *   reset                     before: the request was lost, nothing happened
 *   truncate                  after: the work is done, only the answer is lost
 *   churn                     after a list page is built (see ./churn.ts)
 *   repeated page, reorder    when a list page is built (./listing-order.ts)
 */
import { z } from 'zod';
import { Prng, seedKey } from './random.js';
import { PLAIN_LISTING, type ListingView } from './listing-order.js';

const rate = z.number().min(0).max(1);
const ms = z.number().int().min(0).max(600_000);

const FaultPlanSchema = z
  .object({
    /** Faults apply only to raw paths starting with this. */
    pathPrefix: z.string().startsWith('/'),
    latencyMs: ms,
    /** Extra latency drawn uniformly from [min, max]. */
    latencyMinMs: ms,
    latencyMaxMs: ms,
    /** The link's bandwidth, shared by every answer in flight (./link.ts); 0: unlimited. */
    bandwidthMbps: z.number().min(0).max(100_000),
    rate429: rate,
    rate500: rate,
    rate503: rate,
    resetRate: rate,
    truncateRate: rate,
    slowBodyRate: rate,
    slowChunkBytes: z.number().int().min(1),
    slowChunkDelayMs: ms,
    /** `Retry-After` on injected 429 and 503: seconds, an HTTP date, or null for none. */
    retryAfter: z.union([z.number().int().min(0), z.string().min(1), z.null()]),
    /** After each served list page, this many users are appended... */
    churnAddPerPage: z.number().int().min(0).max(100_000),
    /** ...and this many random live users deleted... */
    churnDeletePerPage: z.number().int().min(0).max(100_000),
    /** ...and this many random live users updated (a changed time zone or connected source). */
    churnUpdatePerPage: z.number().int().min(0).max(100_000),
    /** The list page at this offset carries the users of `repeatPageOf` instead (its envelope still says its own offset); null: off. */
    repeatPageAt: z.number().int().min(0).nullable(),
    repeatPageOf: z.number().int().min(0),
    /** How many times the page repeats; 0: every time it is asked for. */
    repeatPageTimes: z.number().int().min(0),
    /** Chance per list request that the listing takes a new order, kept until the next, or `clear()` (1: a new order on every request). */
    reorderRate: rate,
  })
  .refine((p) => p.latencyMaxMs >= p.latencyMinMs, { message: 'latencyMaxMs must be >= latencyMinMs', path: ['latencyMaxMs'] })
  .refine((p) => p.rate429 + p.rate500 + p.rate503 + p.resetRate + p.truncateRate <= 1, {
    message: 'rate429 + rate500 + rate503 + resetRate + truncateRate must not exceed 1',
    path: ['rate429'],
  });
export type FaultPlan = z.infer<typeof FaultPlanSchema>;

export const NO_FAULTS: Readonly<FaultPlan> = Object.freeze({
  pathPrefix: '/',
  latencyMs: 0,
  latencyMinMs: 0,
  latencyMaxMs: 0,
  bandwidthMbps: 0,
  rate429: 0,
  rate500: 0,
  rate503: 0,
  resetRate: 0,
  truncateRate: 0,
  slowBodyRate: 0,
  slowChunkBytes: 1024,
  slowChunkDelayMs: 50,
  retryAfter: 1,
  churnAddPerPage: 0,
  churnDeletePerPage: 0,
  churnUpdatePerPage: 0,
  repeatPageAt: null,
  repeatPageOf: 0,
  repeatPageTimes: 0,
  reorderRate: 0,
});

interface FailNextMatch {
  method?: 'GET' | 'DELETE';
  pathPrefix?: string;
  /** How many matching requests fail; default 1. */
  times?: number;
}

/** An HTTP error answer. Without `body`, the status's usual body is sent (500 is plain text, as Starlette does). */
interface FailWithStatus extends FailNextMatch {
  status: number;
  retryAfter?: number | string;
  body?: unknown;
}

interface FailWithConnection extends FailNextMatch {
  fault: 'reset' | 'truncate';
}

export type FailNextRule = FailWithStatus | FailWithConnection;

export type FaultAction =
  | { kind: 'none' }
  | { kind: 'status'; status: number; retryAfter: string | undefined; body: unknown }
  | { kind: 'reset' }
  | { kind: 'truncate' };

export interface SlowBody {
  chunkBytes: number;
  chunkDelayMs: number;
}

export interface FaultDecision {
  delayMs: number;
  action: FaultAction;
  slowBody: SlowBody | undefined;
}

interface QueuedRule {
  rule: FailNextRule;
  remaining: number;
}

const NO_ACTION: FaultAction = { kind: 'none' };

export class Faults {
  private current: FaultPlan = { ...NO_FAULTS };
  private readonly queue: QueuedRule[] = [];
  private readonly prng: Prng;
  /** A stream of its own, so that adding a listing fault does not change which requests the random faults hit. */
  private readonly listingPrng: Prng;
  /** The listing's current order (./listing-order.ts); undefined: the directory's own. */
  private orderKey: number | undefined;
  /** Repeated pages served since the plan last set repeatPage*. */
  private repeatsServed = 0;

  constructor(seed: number, plan: Partial<FaultPlan> = {}) {
    this.prng = new Prng(seedKey(seed), 31);
    this.listingPrng = new Prng(seedKey(seed), 37);
    this.set(plan);
  }

  get plan(): Readonly<FaultPlan> {
    return this.current;
  }

  /** Merges `patch` into the plan; throws RangeError (naming the field) when the result is invalid. */
  set(patch: Partial<FaultPlan>): void {
    const result = FaultPlanSchema.safeParse({ ...this.current, ...patch });
    if (!result.success) {
      const issue = result.error.issues[0];
      throw new RangeError(`fault plan: ${issue?.path.join('.') ?? '?'}: ${issue?.message ?? 'invalid'}`);
    }
    this.current = result.data;
    if ('repeatPageAt' in patch || 'repeatPageOf' in patch || 'repeatPageTimes' in patch) this.repeatsServed = 0;
  }

  /** Back to no faults, and forgets queued failNext rules. */
  clear(): void {
    this.current = { ...NO_FAULTS };
    this.queue.length = 0;
    this.orderKey = undefined;
    this.repeatsServed = 0;
  }

  /** How one list request on `path` is served: a page that repeats another, an order drawn anew (./listing-order.ts). */
  listing(path: string): ListingView {
    const p = this.current;
    const faulted = p.repeatPageAt !== null || p.reorderRate > 0 || this.orderKey !== undefined;
    if (!path.startsWith(p.pathPrefix) || !faulted) return PLAIN_LISTING;
    if (p.reorderRate > 0 && this.listingPrng.chance(p.reorderRate)) this.orderKey = this.listingPrng.nextUint32();
    const { repeatPageAt, repeatPageOf, repeatPageTimes } = p;
    return {
      orderKey: this.orderKey,
      sourceOffset: (offset) => {
        if (offset !== repeatPageAt || (repeatPageTimes > 0 && this.repeatsServed >= repeatPageTimes)) return offset;
        this.repeatsServed++;
        return repeatPageOf;
      },
    };
  }

  /** The next `times` requests matching `method`/`pathPrefix` fail as told, before any random fault. */
  failNext(rule: FailNextRule): void {
    const times = rule.times ?? 1;
    if (!Number.isInteger(times) || times < 1) throw new RangeError('failNext: times must be a positive integer');
    this.queue.push({ rule, remaining: times });
  }

  /** failNext failures not yet used. */
  pending(): number {
    return this.queue.reduce((sum, q) => sum + q.remaining, 0);
  }

  decide(method: string, path: string): FaultDecision {
    const queued = this.takeQueued(method, path);
    if (!path.startsWith(this.current.pathPrefix)) return { delayMs: 0, action: queued ?? NO_ACTION, slowBody: undefined };
    return { delayMs: this.latency(), action: queued ?? this.randomAction(), slowBody: this.slowBody() };
  }

  private takeQueued(method: string, path: string): FaultAction | undefined {
    const at = this.queue.findIndex(({ rule }) => (rule.method ?? method) === method && path.startsWith(rule.pathPrefix ?? '/'));
    const entry = this.queue[at];
    if (entry === undefined) return undefined;
    entry.remaining--;
    if (entry.remaining === 0) this.queue.splice(at, 1);
    return toAction(entry.rule);
  }

  private latency(): number {
    const { latencyMs, latencyMinMs, latencyMaxMs } = this.current;
    return latencyMs + (latencyMaxMs > 0 ? this.prng.int(latencyMinMs, latencyMaxMs) : 0);
  }

  private randomAction(): FaultAction {
    const p = this.current;
    if (p.rate429 + p.rate500 + p.rate503 + p.resetRate + p.truncateRate === 0) return NO_ACTION;
    let r = this.prng.float();
    const retryAfter = formatRetryAfter(p.retryAfter);
    if ((r -= p.rate429) < 0) return { kind: 'status', status: 429, retryAfter, body: undefined };
    if ((r -= p.rate500) < 0) return { kind: 'status', status: 500, retryAfter: undefined, body: undefined };
    if ((r -= p.rate503) < 0) return { kind: 'status', status: 503, retryAfter, body: undefined };
    if ((r -= p.resetRate) < 0) return { kind: 'reset' };
    if (r - p.truncateRate < 0) return { kind: 'truncate' };
    return NO_ACTION;
  }

  private slowBody(): SlowBody | undefined {
    const p = this.current;
    if (p.slowBodyRate === 0 || !this.prng.chance(p.slowBodyRate)) return undefined;
    return { chunkBytes: p.slowChunkBytes, chunkDelayMs: p.slowChunkDelayMs };
  }
}

function toAction(rule: FailNextRule): FaultAction {
  if ('fault' in rule) return { kind: rule.fault };
  return { kind: 'status', status: rule.status, retryAfter: formatRetryAfter(rule.retryAfter ?? null), body: rule.body };
}

function formatRetryAfter(value: number | string | null): string | undefined {
  return value === null ? undefined : String(value);
}

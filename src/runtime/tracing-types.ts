/**
 * The shapes ./tracing.ts and ./tracing-sdk.ts share, and the check of a
 * trace carrier that comes from outside (a job's `opts.telemetry.metadata`,
 * the environment of a child process).
 */
type SpanAttributes = Record<string, string | number | boolean>;
export type SpanKindName = 'internal' | 'producer' | 'consumer' | 'client';

/** What a call site may do with its span: add attributes (never keys, secrets or user data), record a failure. */
export interface TraceSpan {
  setAttributes(attributes: SpanAttributes): void;
  recordError(err: unknown): void;
}

export interface SpanOptions {
  attributes?: SpanAttributes;
  kind?: SpanKindName;
  /** A carrier from another process: the span continues that trace. Unchecked input is fine: a bad one is ignored. */
  parent?: unknown;
}

/** The implementation behind the API; ./tracing-sdk.ts provides the live one. */
export interface Tracer {
  withSpan<T>(name: string, options: SpanOptions, fn: (span: TraceSpan) => Promise<T>): Promise<T>;
  /** The same for synchronous work (a SQLite transaction, a checkpoint): no await added. */
  withSpanSync<T>(name: string, options: SpanOptions, fn: (span: TraceSpan) => T): T;
  /** The active context as a carrier, or undefined when there is none. */
  carrier(): string | undefined;
  shutdown(): Promise<void>;
}

export interface TraceHeaders {
  traceparent: string;
  tracestate?: string;
}

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const MAX_CARRIER = 1_024;

/** A carrier from outside, checked: W3C traceparent shape, bounded size; anything else is ignored (undefined). */
export function parseTraceCarrier(carrier: unknown): TraceHeaders | undefined {
  if (typeof carrier !== 'string' || carrier.length > MAX_CARRIER) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(carrier);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { traceparent, tracestate } = parsed as Record<string, unknown>;
  if (typeof traceparent !== 'string' || !TRACEPARENT.test(traceparent)) return undefined;
  return typeof tracestate === 'string' && tracestate.length <= 512 ? { traceparent, tracestate } : { traceparent };
}

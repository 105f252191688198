/**
 * OpenTelemetry traces, opt-in: the one module the rest of the code calls.
 * Off (the default) every call is a plain function call and nothing of
 * OpenTelemetry is loaded; on, ./tracing-sdk.ts is loaded by `import()`.
 *
 * On when the standard variables ask for it (docs/tracing.md):
 * OTEL_TRACES_EXPORTER lists `otlp`, or, with OTEL_TRACES_EXPORTER unset, an
 * OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
 * OTEL_EXPORTER_OTLP_ENDPOINT). OTEL_SDK_DISABLED=true turns it off whatever
 * else is set. Spans go out as OTLP/HTTP JSON (the one exporter shipped):
 * OTEL_EXPORTER_OTLP_PROTOCOL unset or `http/json`; any other protocol
 * leaves tracing off with one warning line, rather than sending JSON where
 * protobuf or gRPC is expected.
 *
 * Trace context crosses processes as a carrier: the JSON of the W3C headers
 * (`{"traceparent":"00-…"}`), the format bullmq-otel writes into a job's
 * `opts.telemetry.metadata`, so producers instrumented with it join too.
 * A carrier from outside (a job, the environment) is checked first
 * (./tracing-types.ts).
 */
import type { SpanOptions, TraceSpan, Tracer } from './tracing-types.js';

const NOOP_SPAN: TraceSpan = { setAttributes: () => undefined, recordError: () => undefined };
const NOOP: Tracer = {
  withSpan: (_name, _options, fn) => fn(NOOP_SPAN),
  withSpanSync: (_name, _options, fn) => fn(NOOP_SPAN),
  carrier: () => undefined,
  shutdown: async () => undefined,
};

let tracer: Tracer = NOOP;
let starting: Promise<void> | undefined;

export type TracingRequest = { on: true; serviceName: string } | { on: false; warning?: string };

const truthy = (v: string | undefined): boolean => v?.trim().toLowerCase() === 'true';
const set = (v: string | undefined): boolean => v !== undefined && v.trim() !== '';

/** Whether the environment asks for traces (pure). */
export function tracingRequest(env: NodeJS.ProcessEnv): TracingRequest {
  if (truthy(env.OTEL_SDK_DISABLED)) return { on: false };
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((e) => e.trim().toLowerCase());
  const asked = set(env.OTEL_TRACES_EXPORTER)
    ? exporters.includes('otlp') && !exporters.includes('none')
    : set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  if (!asked) return { on: false };
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/json').trim();
  if (protocol !== 'http/json') {
    return {
      on: false,
      warning: `user-mirror: traces not exported: OTEL_EXPORTER_OTLP_PROTOCOL is '${protocol.slice(0, 40)}', and only 'http/json' is supported`,
    };
  }
  return { on: true, serviceName: set(env.OTEL_SERVICE_NAME) ? (env.OTEL_SERVICE_NAME ?? '').trim() : 'user-mirror' };
}

/**
 * Starts tracing if the environment asks for it; idempotent, cheap when off.
 * `register: true` (the project's own processes) installs the SDK as the
 * global provider; `false` (the producer library inside another service)
 * only joins the provider that service registered, if any.
 */
export function startTracing(env: NodeJS.ProcessEnv = process.env, options: { register: boolean } = { register: true }): Promise<void> {
  if (starting !== undefined) return starting;
  const request = tracingRequest(env);
  if (!request.on) {
    if (request.warning !== undefined) process.stderr.write(`${request.warning}\n`);
    starting = Promise.resolve();
    return starting;
  }
  starting = import('./tracing-sdk.js').then(
    async (sdk) => {
      tracer = await sdk.startSdkTracer({ serviceName: request.serviceName, register: options.register });
    },
    (err: unknown) => {
      process.stderr.write(`user-mirror: traces not exported: the OpenTelemetry SDK did not load: ${String(err)}\n`);
    },
  );
  return starting;
}

/** Flushes the spans not yet exported and stops the exporter (CLI exit, daemon stop). */
export async function stopTracing(): Promise<void> {
  const current = tracer;
  tracer = NOOP;
  await current.shutdown();
}

/** Runs `fn` inside a span (ended when `fn` settles; a throw is recorded on it). Off: just runs `fn`. */
export function withSpan<T>(name: string, options: SpanOptions, fn: (span: TraceSpan) => Promise<T>): Promise<T> {
  return tracer.withSpan(name, options, fn);
}

/** `withSpan` for synchronous work. */
export function withSpanSync<T>(name: string, options: SpanOptions, fn: (span: TraceSpan) => T): T {
  return tracer.withSpanSync(name, options, fn);
}

/** The active trace context as a carrier for a job or a child process, or undefined (off, or no active span). */
export function traceCarrier(): string | undefined {
  return tracer.carrier();
}

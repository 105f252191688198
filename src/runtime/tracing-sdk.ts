/**
 * The live tracer behind ./tracing.ts, loaded only by its `import()` when
 * the environment asks for traces: the OpenTelemetry SDK, a batch processor,
 * the OTLP/HTTP JSON exporter (which reads its endpoint and headers from the
 * standard variables itself: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
 * OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, OTEL_EXPORTER_OTLP_HEADERS),
 * W3C trace context, and AsyncLocalStorage so a span started in a call is
 * the parent of the spans started under it.
 */
import { context, propagation, trace, ROOT_CONTEXT, SpanKind, SpanStatusCode, type Context, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { settleWithin } from './deadline.js';
import { parseTraceCarrier, type SpanKindName, type SpanOptions, type TraceSpan, type Tracer } from './tracing-types.js';

/** How long a stop waits for the last spans to be exported. */
const SHUTDOWN_MS = 3_000;

/**
 * An export, its retries included, gives up after SHUTDOWN_MS unless the standard
 * OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT says otherwise: the exporter's own 10 s of retries
 * against a receiver that is down would keep a finished command alive that long.
 */
function exportTimeout(): { timeoutMillis?: number } {
  const set = process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT ?? process.env.OTEL_EXPORTER_OTLP_TIMEOUT;
  return set !== undefined && set.trim() !== '' ? {} : { timeoutMillis: SHUTDOWN_MS };
}

const KINDS: Record<SpanKindName, SpanKind> = {
  internal: SpanKind.INTERNAL,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
  client: SpanKind.CLIENT,
};

/**
 * A failed span says which kind of error, not its message: messages name
 * request paths, and a removal's path holds the org's and the member's ids.
 */
function errorText(err: unknown): string {
  return (err instanceof Error ? err.name : typeof err).slice(0, 100);
}

export async function startSdkTracer(options: { serviceName: string; register: boolean }): Promise<Tracer> {
  let provider: TracerProvider | undefined;
  if (options.register) {
    provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': options.serviceName }),
      spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter(exportTimeout()) })],
    });
    // Each set* is refused (false) when the process already has one: then that one serves.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    if (!trace.setGlobalTracerProvider(provider)) {
      await provider.shutdown();
      provider = undefined;
    }
  }
  const tracer = trace.getTracer('user-mirror');

  const parentOf = (carrier: unknown): Context | undefined => {
    if (carrier === undefined) return undefined;
    const headers = parseTraceCarrier(carrier);
    return headers === undefined ? undefined : propagation.extract(ROOT_CONTEXT, headers);
  };

  const start = (name: string, spanOptions: SpanOptions): { span: Span; handle: TraceSpan; inSpan: Context } => {
    const parent = parentOf(spanOptions.parent) ?? context.active();
    const span = tracer.startSpan(name, { kind: KINDS[spanOptions.kind ?? 'internal'], attributes: spanOptions.attributes }, parent);
    const handle: TraceSpan = {
      setAttributes: (attributes) => span.setAttributes(attributes),
      recordError: (err) => span.setStatus({ code: SpanStatusCode.ERROR, message: errorText(err) }),
    };
    return { span, handle, inSpan: trace.setSpan(parent, span) };
  };

  return {
    withSpanSync<T>(name: string, spanOptions: SpanOptions, fn: (span: TraceSpan) => T): T {
      const { span, handle, inSpan } = start(name, spanOptions);
      return context.with(inSpan, () => {
        try {
          return fn(handle);
        } catch (err) {
          handle.recordError(err);
          throw err;
        } finally {
          span.end();
        }
      });
    },
    withSpan<T>(name: string, spanOptions: SpanOptions, fn: (span: TraceSpan) => Promise<T>): Promise<T> {
      const { span, handle, inSpan } = start(name, spanOptions);
      return context.with(inSpan, async () => {
        try {
          return await fn(handle);
        } catch (err) {
          handle.recordError(err);
          throw err;
        } finally {
          span.end();
        }
      });
    },
    carrier() {
      const headers: Record<string, string> = {};
      propagation.inject(context.active(), headers);
      return headers.traceparent === undefined ? undefined : JSON.stringify(headers);
    },
    async shutdown() {
      if (provider === undefined) return;
      let failed = false;
      const flushed = provider.shutdown().catch(() => {
        failed = true;
      });
      // A receiver that is down must not hold a command's exit or a daemon's stop for the exporter's retries (~10 s).
      if (!(await settleWithin(flushed, SHUTDOWN_MS)) || failed) {
        process.stderr.write(`user-mirror: traces not flushed: the OTLP receiver did not take them within ${SHUTDOWN_MS} ms\n`);
      }
    },
  };
}

/**
 * When tracing is on (src/runtime/tracing.ts) and which trace carriers from
 * outside are taken (src/runtime/tracing-types.ts): pure, no SDK loaded.
 */
import { describe, expect, it } from 'vitest';
import { tracingRequest } from '../src/runtime/tracing.js';
import { parseTraceCarrier } from '../src/runtime/tracing-types.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('tracingRequest', () => {
  it('is off with nothing set, and on with an endpoint or OTEL_TRACES_EXPORTER=otlp', () => {
    expect(tracingRequest({})).toEqual({ on: false });
    expect(tracingRequest({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toEqual({ on: true, serviceName: 'user-mirror' });
    expect(tracingRequest({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }).on).toBe(true);
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp' }).on).toBe(true);
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SERVICE_NAME: ' w ' })).toEqual({ on: true, serviceName: 'w' });
  });

  it('stays off when told: OTEL_SDK_DISABLED=true, an exporter list without otlp, or with none', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingRequest({ ...endpoint, OTEL_SDK_DISABLED: 'TRUE' }).on).toBe(false);
    expect(tracingRequest({ ...endpoint, OTEL_SDK_DISABLED: 'false' }).on).toBe(true);
    expect(tracingRequest({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }).on).toBe(false);
    expect(tracingRequest({ ...endpoint, OTEL_TRACES_EXPORTER: 'console' }).on).toBe(false);
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'otlp,none' }).on).toBe(false);
  });

  it('exports http/json only: another protocol leaves it off with a warning naming the variable', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' };
    expect(tracingRequest({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).on).toBe(true);
    for (const protocol of ['grpc', 'http/protobuf']) {
      const r = tracingRequest({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: protocol });
      expect(r).toMatchObject({ on: false, warning: expect.stringContaining('OTEL_EXPORTER_OTLP_PROTOCOL') });
    }
  });
});

describe('parseTraceCarrier', () => {
  it("takes bullmq-otel's format, a W3C traceparent in JSON, with its tracestate", () => {
    expect(parseTraceCarrier(JSON.stringify({ traceparent: TP }))).toEqual({ traceparent: TP });
    expect(parseTraceCarrier(JSON.stringify({ traceparent: TP, tracestate: 'a=1' }))).toEqual({ traceparent: TP, tracestate: 'a=1' });
  });

  it('ignores anything else: not a string, not JSON, a malformed traceparent, an oversized carrier', () => {
    for (const bad of [
      undefined,
      42,
      { traceparent: TP },
      'not json',
      'null',
      JSON.stringify({ traceparent: TP.toUpperCase() }),
      JSON.stringify({ traceparent: `${TP}\n` }),
      JSON.stringify({ traceparent: TP, pad: 'x'.repeat(2_000) }),
    ]) {
      expect(parseTraceCarrier(bad), JSON.stringify(bad)).toBeUndefined();
    }
  });
});

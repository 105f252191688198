/**
 * The one error hierarchy of the service client.
 *
 *   ServiceError                  base: method + path (never a key, never a query secret)
 *   ├─ RequestValidationError     rejected before anything was sent (limit 501, empty id)
 *   ├─ HttpError                  the service answered with a non-2xx status
 *   ├─ NetworkError               connection refused / reset / DNS: no complete answer
 *   ├─ TimeoutError               connect, headers, a body gap, or the whole response took too long
 *   ├─ ResponseTooLargeError      the body grew past the size bound; reading stopped there
 *   └─ ResponseValidationError    a 2xx body that does not match the wire schema
 *
 * Whether an error is worth retrying is decided in one place: `isRetryable`
 * in ./retry.ts.
 */
import type { ErrorDetail } from './schemas.js';

export type HttpMethod = 'GET' | 'DELETE';

export class ServiceError extends Error {
  override name = 'ServiceError';
  constructor(
    message: string,
    readonly method: HttpMethod,
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class RequestValidationError extends ServiceError {
  override name = 'RequestValidationError';
  constructor(
    readonly field: string,
    problem: string,
    method: HttpMethod,
    path: string,
  ) {
    super(`invalid request: ${field}: ${problem} (nothing was sent)`, method, path);
  }
}

export class HttpError extends ServiceError {
  override name = 'HttpError';
  constructor(
    readonly status: number,
    method: HttpMethod,
    path: string,
    readonly detail: ErrorDetail | undefined,
    readonly retryAfterMs: number | undefined,
  ) {
    super(`${method} ${path} -> HTTP ${status}${describeDetail(detail)}`, method, path);
  }
}

export class NetworkError extends ServiceError {
  override name = 'NetworkError';
  constructor(
    readonly code: string,
    method: HttpMethod,
    path: string,
    options?: { cause?: unknown },
  ) {
    super(`${method} ${path} -> network error ${code}`, method, path, options);
  }
}

/** `total`: headers and the whole body did not arrive within the request deadline (HTTP_REQUEST_TIMEOUT_MS). */
export type TimeoutPhase = 'connect' | 'headers' | 'body' | 'total';

export class TimeoutError extends ServiceError {
  override name = 'TimeoutError';
  constructor(
    readonly phase: TimeoutPhase,
    method: HttpMethod,
    path: string,
    options?: { cause?: unknown },
  ) {
    super(`${method} ${path} -> ${describePhase(phase)}`, method, path, options);
  }
}

function describePhase(phase: TimeoutPhase): string {
  if (phase === 'total') return 'timed out: the whole response did not arrive within HTTP_REQUEST_TIMEOUT_MS';
  return `timed out waiting for ${phase}`;
}

export class ResponseTooLargeError extends ServiceError {
  override name = 'ResponseTooLargeError';
  constructor(
    readonly limitBytes: number,
    method: HttpMethod,
    path: string,
  ) {
    super(`${method} ${path} -> response body larger than SYNC_MAX_PAGE_BYTES (${limitBytes} bytes); not read further`, method, path);
  }
}

export class ResponseValidationError extends ServiceError {
  override name = 'ResponseValidationError';
  constructor(
    readonly issues: string,
    method: HttpMethod,
    path: string,
  ) {
    super(`${method} ${path} -> unexpected response: ${issues}`, method, path);
  }
}

/** One line for logs and failure reasons; FastAPI items become `loc: msg`. */
export function describeDetail(detail: ErrorDetail | undefined): string {
  if (detail === undefined) return '';
  if (typeof detail === 'string') return `: ${detail}`;
  if (Array.isArray(detail)) {
    const parts = detail.map((d) => `${(d.loc ?? []).join('.')}: ${d.msg ?? d.type ?? 'invalid'}`);
    return parts.length > 0 ? `: ${parts.join('; ')}` : '';
  }
  return `: ${JSON.stringify(detail)}`;
}

/**
 * The one error hierarchy of the service client.
 *
 *   ServiceError                  base: method + path (never a key, never a query secret)
 *   ├─ RequestValidationError     rejected before anything was sent (limit 501, empty id)
 *   ├─ HttpError                  the service answered with a non-2xx status
 *   ├─ NetworkError               connection refused / reset / DNS: no complete answer
 *   ├─ TimeoutError               headers or body did not arrive in time
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

export type TimeoutPhase = 'connect' | 'headers' | 'body';

export class TimeoutError extends ServiceError {
  override name = 'TimeoutError';
  constructor(
    readonly phase: TimeoutPhase,
    method: HttpMethod,
    path: string,
    options?: { cause?: unknown },
  ) {
    super(`${method} ${path} -> timed out waiting for ${phase}`, method, path, options);
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

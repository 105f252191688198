/**
 * The one error hierarchy of the service client.
 *
 *   ServiceError                  base: method + path (never a key, never a query secret)
 *   ├─ RequestValidationError     rejected before anything was sent (limit 501, empty id)
 *   ├─ HttpError                  the service answered with a non-2xx status
 *   ├─ NetworkError               connection refused / reset / DNS: no complete answer
 *   ├─ TlsError                   the server's certificate was not trusted, or it spoke no TLS (not retried)
 *   ├─ TimeoutError               connect, headers, a body gap, or the whole response took too long
 *   ├─ ResponseTooLargeError      the body grew past the size bound; reading stopped there
 *   └─ ResponseValidationError    a 2xx body that does not match the wire schema
 *
 * Whether an error is worth retrying is decided in one place: `isRetryable`
 * in ./retry.ts.
 */
import type { ErrorDetail } from './schemas.js';
import { isRecord } from '../runtime/is-record.js';

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

/** What the error body was, when it carried no `detail` to quote. */
export type ErrorBodyKind = 'empty' | 'not-json' | 'other-json' | 'object';

export class HttpError extends ServiceError {
  override name = 'HttpError';
  constructor(
    readonly status: number,
    method: HttpMethod,
    path: string,
    readonly detail: ErrorDetail | undefined,
    readonly retryAfterMs: number | undefined,
    options: { bodyKind?: ErrorBodyKind } = {},
  ) {
    super(`${method} ${path} -> HTTP ${status}${describeDetail(detail, options.bodyKind)}`, method, path);
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

/**
 * TLS failed: the server's certificate is not trusted (an unknown CA, another
 * name, expired) or the server answered something other than TLS. Not worth
 * a retry: the next attempt meets the same certificate. `hint` names the
 * setting that fixes a private CA (SERVICE_CA_FILE) where there is one.
 */
export class TlsError extends ServiceError {
  override name = 'TlsError';
  constructor(
    readonly code: string,
    reason: string,
    method: HttpMethod,
    path: string,
    hint: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(`${method} ${path} -> TLS failed: ${reason} (${code})${hint === undefined ? '' : `; ${hint}`}`, method, path, options);
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
  /** `setting`: the variable that sets the bound (SYNC_MAX_PAGE_BYTES for a page, SYNC_MAX_RESOLVE_BYTES for one record). */
  constructor(
    readonly limitBytes: number,
    readonly setting: string | undefined,
    method: HttpMethod,
    path: string,
  ) {
    super(`${method} ${path} -> response body larger than ${setting ?? 'its bound'} (${limitBytes} bytes); not read further`, method, path);
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

const DETAIL_MAX = 300;

const BODY_WITHOUT_DETAIL: Record<ErrorBodyKind, string> = {
  empty: ' (empty body)',
  'not-json': ' (body is not JSON)',
  'other-json': ' (body is JSON but not an object)',
  object: ' (no detail in the body)',
};

/**
 * One line for logs and failure reasons, whatever shape `detail` has:
 * FastAPI items become `loc: msg`, `{error_type, error_message}` becomes
 * `error_type: error_message`, anything else its JSON. Never throws. The
 * body text of a non-JSON answer is not quoted: a proxy page may echo the
 * request, key included.
 */
function describeDetail(detail: ErrorDetail | undefined, bodyKind?: ErrorBodyKind): string {
  if (detail === undefined) return bodyKind === undefined ? '' : BODY_WITHOUT_DETAIL[bodyKind];
  return `: ${clip(describeValue(detail))}`;
}

function describeValue(detail: unknown): string {
  if (typeof detail === 'string') return detail === '' ? '(empty detail)' : detail;
  if (Array.isArray(detail)) return detail.length === 0 ? '(empty detail list)' : detail.map(describeItem).join('; ');
  if (isRecord(detail)) return describeObject(detail);
  return `detail ${String(detail)}`;
}

function describeItem(item: unknown): string {
  if (!isRecord(item)) return describeValue(item);
  const { loc, msg, type } = item;
  const where = Array.isArray(loc) ? loc.map((part) => String(part)).join('.') : '';
  const what = typeof msg === 'string' ? msg : typeof type === 'string' ? type : undefined;
  if (what === undefined) return where === '' ? toJson(item) : `${where}: invalid`;
  return where === '' ? what : `${where}: ${what}`;
}

function describeObject(detail: Record<string, unknown>): string {
  const { error_type: kind, error_message: message } = detail;
  if (typeof kind === 'string' && typeof message === 'string') return `${kind}: ${message}`;
  if (typeof message === 'string') return message;
  if (typeof detail.msg === 'string') return describeItem(detail);
  return toJson(detail);
}

function toJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function clip(text: string): string {
  const flat = text.replace(/[\r\n]+/g, ' ');
  return flat.length > DETAIL_MAX ? `${flat.slice(0, DETAIL_MAX)}…` : flat;
}

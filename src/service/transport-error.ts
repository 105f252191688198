/** A failed request's error, by what failed: the deadline, one of undici's timeouts, an abort, or the network. */
import { errors as undiciErrors } from 'undici';
import { NetworkError, TimeoutError, type HttpMethod } from './errors.js';
import type { Deadline } from '../runtime/deadline.js';

export function transportError(err: unknown, method: HttpMethod, path: string, deadline: Deadline): Error {
  if (deadline.expired) return new TimeoutError('total', method, path, { cause: err });
  if (err instanceof undiciErrors.HeadersTimeoutError) return new TimeoutError('headers', method, path, { cause: err });
  if (err instanceof undiciErrors.BodyTimeoutError) return new TimeoutError('body', method, path, { cause: err });
  if (err instanceof undiciErrors.ConnectTimeoutError) return new TimeoutError('connect', method, path, { cause: err });
  if (err instanceof undiciErrors.RequestAbortedError || (err instanceof Error && err.name === 'AbortError')) {
    return err;
  }
  const code = (err as { code?: unknown } | null)?.code;
  return new NetworkError(typeof code === 'string' ? code : 'UNKNOWN', method, path, { cause: err });
}

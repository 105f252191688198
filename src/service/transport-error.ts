/** A failed request's error, by what failed: the deadline, one of undici's timeouts, an abort, or the network. */
import { errors as undiciErrors } from 'undici';
import { NetworkError, TimeoutError, TlsError, type HttpMethod } from './errors.js';
import type { Deadline } from '../runtime/deadline.js';

/** OpenSSL's and Node's codes for a certificate the client does not trust. */
const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Why TLS failed, in words, or undefined when `code` is not a TLS failure. */
function tlsReason(code: string): string | undefined {
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return "the server's certificate is not for this host name";
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return "the server's certificate is out of its validity dates";
  if (UNTRUSTED.has(code)) return "the server's certificate is not signed by a trusted CA";
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || code === 'ERR_SSL_PACKET_LENGTH_TOO_LONG')
    return 'the server did not answer in TLS (plain http?)';
  return undefined;
}

/** `untrustedHint`: said with an untrusted certificate (where this target's private CA is given). */
export function transportError(err: unknown, method: HttpMethod, path: string, deadline: Deadline, untrustedHint?: string): Error {
  if (deadline.expired) return new TimeoutError('total', method, path, { cause: err });
  if (err instanceof undiciErrors.HeadersTimeoutError) return new TimeoutError('headers', method, path, { cause: err });
  if (err instanceof undiciErrors.BodyTimeoutError) return new TimeoutError('body', method, path, { cause: err });
  if (err instanceof undiciErrors.ConnectTimeoutError) return new TimeoutError('connect', method, path, { cause: err });
  if (err instanceof undiciErrors.RequestAbortedError || (err instanceof Error && err.name === 'AbortError')) {
    return err;
  }
  const code = (err as { code?: unknown } | null)?.code;
  const tls = typeof code === 'string' ? tlsReason(code) : undefined;
  if (tls !== undefined && typeof code === 'string') {
    return new TlsError(code, tls, method, path, UNTRUSTED.has(code) ? untrustedHint : undefined, { cause: err });
  }
  return new NetworkError(typeof code === 'string' ? code : 'UNKNOWN', method, path, { cause: err });
}

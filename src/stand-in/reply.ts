/** A stand-in answer before it is sent: status, body and headers, and the two JSON forms the service uses. */
export interface Reply {
  status: number;
  body: string | Buffer;
  contentType: string;
  headers?: Record<string, string>;
}

/** `body` as JSON; a string or Buffer is taken to be JSON text already. */
export function jsonReply(status: number, body: unknown, headers?: Record<string, string>): Reply {
  const text = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  return { status, body: text, contentType: 'application/json', headers };
}

/** `{"detail": "..."}`: the plain-string form upstream uses for non-validation errors. */
export function detailReply(status: number, detail: string, headers?: Record<string, string>): Reply {
  return jsonReply(status, { detail }, headers);
}

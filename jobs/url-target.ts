/**
 * A service a queue is bound to, named by a fingerprint of its URL: the
 * management service of the removal queue, the receiver of the webhook
 * queue. Every spelling of one URL is one target, and the target's id (part
 * of a queue's name, so of Redis keys) carries neither credentials nor a
 * query string.
 */
import { createHash } from 'node:crypto';

export interface UrlTarget {
  /** 16 hex digits of SHA-256 over the canonical URL (`canonicalUrl`). */
  id: string;
  /** The canonical URL, for logs and reasons. */
  url: string;
}

/**
 * `https://API.example.com:443/base/` → `https://api.example.com/base`:
 * scheme and host lower-cased, default port, user info, query, fragment and
 * trailing slashes dropped, so every spelling of one service is one target.
 */
export function canonicalUrl(url: string): string {
  const u = new URL(url);
  return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
}

export function urlTarget(url: string): UrlTarget {
  const canonical = canonicalUrl(url);
  return { id: createHash('sha256').update(canonical).digest('hex').slice(0, 16), url: canonical };
}

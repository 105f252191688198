/**
 * Nothing personal crosses a network in clear by default: the rule that says
 * whether an address reaches beyond this host. A URL that carries health data
 * or a key (the service, the management service, a webhook or sink receiver)
 * may be plain `http:` only to loopback; a replica may listen without TLS
 * only on loopback. Beyond it, TLS is required, unless the operator says that
 * a TLS proxy (or a mesh that encrypts) carries the traffic: TLS_BY_PROXY=1.
 *
 * Pure: a host or URL in, a problem (without the variable's name, which the
 * caller puts in front) or undefined out. Nothing is resolved: a host name
 * other than `localhost` is beyond loopback whatever it resolves to today.
 */
import { BlockList, isIP } from 'node:net';

/** The one setting by which an operator says a TLS proxy stands in front (docs/configuration.md). */
export const TLS_PROXY_SETTING = 'TLS_BY_PROXY';

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** Whether `host` (a name, an IPv4 or IPv6 address, brackets allowed) is this host's loopback and nothing else. */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
  if (h === 'localhost') return true;
  const family = isIP(h);
  if (family === 4) return LOOPBACK.check(h, 'ipv4');
  if (family === 6) return LOOPBACK.check(h, 'ipv6');
  return false;
}

const PROXY_ADVICE = `or ${TLS_PROXY_SETTING}=1 when a TLS proxy carries it`;

/**
 * Why `url` would carry data in clear beyond this host, or undefined: an
 * `https:` URL, or `http:` to loopback, is fine. A URL that does not parse is
 * not this rule's business (its schema reports it).
 */
export function clearTextUrlProblem(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  if (parsed.protocol !== 'http:' || isLoopbackHost(parsed.hostname)) return undefined;
  return `plain http: to ${parsed.hostname}, beyond this host, would carry health data and keys in clear; use https:, ${PROXY_ADVICE}`;
}

/** Why a server listening on `host` without TLS would serve beyond this host in clear, or undefined. */
export function clearTextListenProblem(host: string, tls: boolean): string | undefined {
  if (tls || isLoopbackHost(host)) return undefined;
  return `${host} is beyond loopback and would serve health data and keys in clear; give the replica a certificate (REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE), ${PROXY_ADVICE.replace('carries it', 'stands in front')}`;
}

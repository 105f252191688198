/**
 * What the process logger hides, built from the configuration: the second
 * line of defence (the first is never putting a key into a log object).
 *
 * - by path (pino's `redact`): every header a key travels in, as configured
 *   (`SERVICE_API_KEY_HEADER`, `REPLICA_API_KEY_HEADER`, beside the default
 *   names), the management key's, `authorization` and `webhook-signature`;
 *   fields named after the secret variables (`WEBHOOK_SECRET`, `apiKey`…);
 * - in the finished line (`scrubLine`): the value of every secret the
 *   process was given, wherever it landed (an error message, a URL), a
 *   password in any URL's user info, and a `password=` query parameter.
 *
 * Pure: no I/O, so the decisions are tested without a process.
 */
import { SECRET_ENV, type EnvName } from './config.js';

export const CENSOR = '[redacted]';

/** Header names that carry a key or a signature whatever the configuration says. */
const KEY_HEADERS = ['x-service-api-key', 'x-management-key', 'authorization', 'proxy-authorization', 'webhook-signature'];
const KEY_FIELDS = ['apiKey', 'managementKey', 'password', 'secret', 'sentinelPassword'];
/** Shorter values would redact ordinary words; every key the registry accepts is longer. */
const MIN_SECRET_LENGTH = 6;

export interface Redaction {
  paths: string[];
  /** Literal values to hide, longest first (so one secret inside another is hidden whole). */
  secrets: string[];
}

/** The settings a logger may see: any subset of the configuration. */
export type RedactionConfig = Partial<Record<EnvName, unknown>>;

export function redactionFor(config: RedactionConfig): Redaction {
  const headers = new Set(KEY_HEADERS);
  for (const name of ['SERVICE_API_KEY_HEADER', 'REPLICA_API_KEY_HEADER'] as const) {
    const value = config[name];
    if (typeof value === 'string' && value !== '') headers.add(value.toLowerCase());
  }
  const fields = [...KEY_FIELDS, ...SECRET_ENV];
  const paths = [
    ...fields.flatMap((f) => [f, `*.${f}`]),
    ...[...headers].flatMap((h) => [`headers["${h}"]`, `*.headers["${h}"]`, `req.headers["${h}"]`, `res.headers["${h}"]`]),
  ];
  const secrets = new Set<string>();
  for (const name of SECRET_ENV) {
    const value = config[name];
    if (typeof value !== 'string') continue;
    for (const part of secretParts(name, value)) if (part.length >= MIN_SECRET_LENGTH) secrets.add(part);
  }
  return { paths, secrets: [...secrets].sort((a, b) => b.length - a.length) };
}

/** The forms a secret may be logged in: itself, a URL's password (raw and decoded), a webhook key's base64. */
function secretParts(name: EnvName, value: string): string[] {
  if (name === 'REDIS_URL') {
    try {
      const password = new URL(value).password;
      return password === '' ? [] : [password, decodeURIComponent(password)];
    } catch {
      return [];
    }
  }
  if (name === 'WEBHOOK_SECRET') return [value, value.replace(/^whsec_/, '')];
  if (name === 'REDIS_TLS_KEY') return value.split(/\r?\n/).filter((l) => !l.startsWith('-----'));
  return [value];
}

const URL_PASSWORD = /([a-z][a-z0-9+.-]*:\/\/[^\s/:@"'\\]*:)[^\s/@"'\\]+@/gi;
const QUERY_PASSWORD = /([?&;](?:password|pass|pwd|secret|token)=)[^&#\s"'\\]+/gi;

/** `line` with every secret of `redaction`, URL password and password query replaced by CENSOR. */
export function scrubLine(line: string, redaction: Redaction): string {
  let out = line;
  for (const secret of redaction.secrets) {
    // As JSON writes it (a quote or backslash in a key is escaped in the line).
    const written = JSON.stringify(secret).slice(1, -1);
    if (out.includes(written)) out = out.split(written).join(CENSOR);
  }
  return out.replace(URL_PASSWORD, `$1${CENSOR}@`).replace(QUERY_PASSWORD, `$1${CENSOR}`);
}

/**
 * The stand-in's keys. Given keys (the CLI passes the environment's) are
 * used as they are; missing ones are derived from the seed, so a restart
 * with the same seed accepts the same keys and a running client or daemon
 * keeps working instead of falling into 401s. They are keys of a local
 * fake, never of a real account, so being predictable from the seed is fine.
 */
import { createHmac } from 'node:crypto';
import { MANAGEMENT_KEY_HEADER, type Keys } from './routes.js';

/** Where a key came from: passed in (the CLI: the environment), or derived from the seed. */
export type KeyOrigin = 'given' | 'seed';

export interface KeyOrigins {
  apiKey: KeyOrigin;
  managementKey: KeyOrigin;
}

export interface KeyRequest {
  seed: number;
  apiKey?: string;
  /** Default `x-service-api-key`; matched case-insensitively. */
  apiKeyHeader?: string;
  managementKey?: string;
}

/** A label per key, so the two keys of one seed differ and neither reveals the other. */
const LABELS = { apiKey: 'user-mirror stand-in team API key', managementKey: 'user-mirror stand-in management key' } as const;

/** `sk_…` or `mg_…` plus 32 hex digits: the shape of the stand-in's keys since they were random. */
export function derivedKey(label: keyof typeof LABELS, seed: number): string {
  const prefix = label === 'apiKey' ? 'sk_' : 'mg_';
  return prefix + createHmac('sha256', LABELS[label]).update(String(seed)).digest('hex').slice(0, 32);
}

export function resolveKeys(request: KeyRequest): { keys: Keys; origins: KeyOrigins } {
  const keys = {
    apiKey: request.apiKey ?? derivedKey('apiKey', request.seed),
    apiKeyHeader: (request.apiKeyHeader ?? 'x-service-api-key').toLowerCase(),
    managementKey: request.managementKey ?? derivedKey('managementKey', request.seed),
  };
  // Equal keys or headers would make "team key on the management route" undecidable.
  if (keys.apiKey === keys.managementKey) throw new RangeError('the team API key and the management key must differ');
  if (keys.apiKeyHeader === MANAGEMENT_KEY_HEADER) throw new RangeError(`the team API key header cannot be ${MANAGEMENT_KEY_HEADER}`);
  const origin = (given: string | undefined): KeyOrigin => (given === undefined ? 'seed' : 'given');
  return { keys, origins: { apiKey: origin(request.apiKey), managementKey: origin(request.managementKey) } };
}

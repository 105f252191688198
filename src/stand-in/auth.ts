/**
 * Which key opens which door. Team routes (/v2) take the team key in the
 * configured header; the management route (/v1) takes only the management
 * key in X-Management-Key. A valid team key offered to /v1 — in either
 * header — is a 403 (known key, wrong resource); anything else missing or
 * wrong is a 401. Comparisons are constant-time, out of habit.
 */
import { keyDigest, offeredKeyMatches } from '../wire/same-key.js';
import type { IncomingHttpHeaders } from 'node:http';

export const MANAGEMENT_KEY_HEADER = 'x-management-key';

export interface Keys {
  apiKey: string;
  /** Lowercase header name. */
  apiKeyHeader: string;
  managementKey: string;
}

export type AuthOutcome = 'ok' | 'unauthorized' | 'forbidden';

export function authorizeTeam(headers: IncomingHttpHeaders, keys: Keys): AuthOutcome {
  return sameKey(headers[keys.apiKeyHeader], keys.apiKey) ? 'ok' : 'unauthorized';
}

export function authorizeManagement(headers: IncomingHttpHeaders, keys: Keys): AuthOutcome {
  const offered = headers[MANAGEMENT_KEY_HEADER];
  if (sameKey(offered, keys.managementKey)) return 'ok';
  if (sameKey(offered, keys.apiKey) || sameKey(headers[keys.apiKeyHeader], keys.apiKey)) return 'forbidden';
  return 'unauthorized';
}

function sameKey(offered: string | string[] | undefined, expected: string): boolean {
  return offeredKeyMatches(offered, keyDigest(expected));
}

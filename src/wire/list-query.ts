/**
 * The list endpoint's query, as the service reads it: `offset` (default 0,
 * at least 0) and `limit` (default 100, 1..500). Shared by the stand-in and
 * the replica, so both refuse the same queries with the same 422 items.
 */
import { failedItems, queryInt, type ValidationItem } from './validation.js';

export const MAX_LIMIT = 500;
export const DEFAULT_LIMIT = 100;

export type ListQuery = { ok: true; offset: number; limit: number } | { ok: false; items: ValidationItem[] };

export function parseListQuery(params: URLSearchParams): ListQuery {
  const offset = queryInt(params, 'offset', { default: 0, ge: 0 });
  const limit = queryInt(params, 'limit', { default: DEFAULT_LIMIT, ge: 1, le: MAX_LIMIT });
  if (offset.ok && limit.ok) return { ok: true, offset: offset.value, limit: limit.value };
  return { ok: false, items: failedItems([offset, limit]) };
}

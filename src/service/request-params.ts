/** A request's arguments, checked before anything leaves the process (RequestValidationError names the field). */
import { z } from 'zod';
import { RequestValidationError, type HttpMethod } from './errors.js';
import { MAX_PAGE_LIMIT } from './schemas.js';

const PageParamsSchema = z.object({
  offset: z.number().int('must be an integer').min(0, 'must be >= 0'),
  limit: z.number().int('must be an integer').min(1, 'must be >= 1').max(MAX_PAGE_LIMIT, `must be <= ${MAX_PAGE_LIMIT}`),
});

export function pageQuery(params: { offset: number; limit: number }, path: string): string {
  const checked = PageParamsSchema.safeParse(params);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    throw new RequestValidationError(String(issue?.path[0] ?? 'params'), issue?.message ?? 'invalid', 'GET', path);
  }
  return `?offset=${checked.data.offset}&limit=${checked.data.limit}`;
}

export function requireId(field: string, value: string, method: HttpMethod, route: string): void {
  if (typeof value !== 'string' || value.length === 0) {
    throw new RequestValidationError(field, 'must be a non-empty string', method, route);
  }
}

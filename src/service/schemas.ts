/**
 * Wire shapes of the user-directory service, as zod schemas. Every TypeScript
 * type that describes a service payload is inferred from here.
 *
 * Tolerance follows what the live service sends (docs/service-notes.md):
 * optional and deprecated fields may be null or absent, unknown fields are
 * kept (`looseObject`), and both date-time forms are accepted. Identity fields
 * (`user_id`, `team_id`, `client_user_id`) are strict, because a wrong
 * identity in the mirror is worse than a skipped record. Every other rule
 * here is applied field by field (./user-record.ts): a field that breaks its
 * rule is dropped with a warning, the record is kept.
 */
import { z } from 'zod';

/**
 * `2022-08-04T12:42:45.596792+00:00`, `2026-01-12T12:39:40Z`, and without
 * an offset (`2022-08-04T12:42:45`), which the mirror reads as UTC because
 * the service states all its times are UTC (db/SCHEMA.md).
 */
const DateTime = z.iso.datetime({
  offset: true,
  local: true,
  error: 'must be an ISO 8601 date-time (offset, Z or none)',
});
/** `YYYY-MM-DD`. */
const IsoDate = z.iso.date({ error: 'must be a date YYYY-MM-DD' });

/** `provider` (current) or `source` (deprecated): the same descriptor. */
const SourceDescriptorSchema = z.looseObject({
  slug: z.string().min(1, 'must be a non-empty string'),
  name: z.string(),
  logo: z.string().nullish(),
});

const ConnectedSourceSchema = z
  .looseObject({
    created_on: DateTime.nullish(),
    provider: SourceDescriptorSchema.optional(),
    source: SourceDescriptorSchema.optional(),
  })
  .refine((s) => s.provider !== undefined || s.source !== undefined, {
    message: 'a connected source needs `provider` or `source`',
    path: ['provider'],
  });

const FallbackTimeZoneSchema = z.looseObject({
  id: z.string().min(1, 'must be a non-empty string'),
  source_slug: z.string().nullish(),
  updated_at: DateTime.nullish(),
});

const FallbackBirthDateSchema = z.looseObject({
  value: IsoDate,
  source_slug: z.string().nullish(),
  updated_at: DateTime.nullish(),
});

/** What makes a record a user at all: a record failing this is rejected. */
export const UserIdentitySchema = z.looseObject({
  user_id: z.guid(),
  team_id: z.guid(),
  client_user_id: z.string().min(1, 'must be a non-empty string'),
});

/**
 * The whole record, and the type of a parsed one. A parsed User always
 * satisfies it: ./user-record.ts drops what breaks a rule (an unreadable
 * `connected_sources` becomes `[]`).
 */
export const UserSchema = UserIdentitySchema.extend({
  created_on: DateTime.nullish(),
  connected_sources: z.array(ConnectedSourceSchema),
  fallback_time_zone: FallbackTimeZoneSchema.nullish(),
  fallback_birth_date: FallbackBirthDateSchema.nullish(),
  ingestion_start: IsoDate.nullish(),
  ingestion_end: IsoDate.nullish(),
});
export type User = z.infer<typeof UserSchema>;

/**
 * The list envelope. `users` stays `unknown[]` here so that one bad record
 * can be reported (or set aside by the sync) without losing the page: see
 * `parseUserRecord`. Loose: keys the service adds are reported, not fatal.
 */
export const UserPageEnvelopeSchema = z.looseObject({
  users: z.array(z.unknown()),
  total: z.number().int().min(0),
  offset: z.number().int().min(0),
  limit: z.number().int().min(0),
});

/**
 * The largest `limit` the list endpoint takes (1..500, default 100). The
 * client refuses more before sending; the stand-in and the replica answer
 * more with the service's 422 (./server-wire.ts); the sync always asks for it.
 */
export const MAX_PAGE_LIMIT = 500;

/** FastAPI / Pydantic v2 validation error item. `loc` mixes strings and ints. */
const ValidationErrorItemSchema = z.looseObject({
  loc: z.array(z.union([z.string(), z.number()])).optional(),
  msg: z.string().optional(),
  type: z.string().optional(),
  input: z.unknown().optional(),
  ctx: z.record(z.string(), z.unknown()).optional(),
});

/**
 * `detail` comes as a list, a string or an object, and odd services send
 * null, numbers or lists of anything: never assume a list. A list item that
 * is not a FastAPI item is kept as the JSON it is.
 */
const ErrorDetailSchema = z.union([z.array(z.union([ValidationErrorItemSchema, z.json()])), z.json()]);
export type ErrorDetail = z.infer<typeof ErrorDetailSchema>;

export const ErrorBodySchema = z.looseObject({ detail: ErrorDetailSchema.optional() });

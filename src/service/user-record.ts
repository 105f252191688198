/**
 * One user record, strict about identity and tolerant about everything else.
 * A record whose `user_id`, `team_id` and `client_user_id` pass their rules is
 * a user; any other field that breaks its rule (in ./schemas.ts, still the
 * one source of the rules) is dropped from the parsed User and reported as a
 * field warning, because one odd optional field must not cost the mirror a
 * user. Pure: no I/O.
 *
 * The rules are applied by walking the zod schemas themselves: a failing
 * optional part is dropped, a failing required part (a descriptor's `slug`,
 * a time zone's `id`) takes its enclosing object with it, and an array loses
 * only the items that fail.
 */
import { z } from 'zod';
import { UserIdentitySchema, UserSchema, type User } from './schemas.js';
import { isRecord } from '../runtime/is-record.js';
import { formatIssues, formatPath } from '../runtime/zod-issues.js';
import { ruleOfIssueCode, type WarningRule } from './warning-rules.js';

/** A field dropped from a record because it broke its rule (the mirror stores them in `field_warnings`). */
export interface FieldWarning {
  /** Path in the record as received: `ingestion_start`, `connected_sources[2].provider.slug`. */
  field: string;
  /** The rule the value broke, and what was dropped when more than the field itself: text for people. */
  problem: string;
  /** The rule's fixed name (./warning-rules.ts): a label an alert can be written against. */
  rule: WarningRule;
}

/** A user record as received: the parsed user, its text exactly as received, and the fields dropped from it. */
export interface ReceivedUser {
  /** The parsed record: fields that broke their rule are absent. */
  user: User;
  /** The record's text exactly as received, unknown fields included. */
  rawJson: string;
  /** The fields dropped from `user`. */
  warnings: readonly FieldWarning[];
}

export type UserParse = { ok: true; user: User; warnings: FieldWarning[] } | { ok: false; issues: string };

type Path = PropertyKey[];
type Outcome<T> = { ok: true; value: T } | { ok: false; path: Path; message: string; code: string | undefined };

/**
 * Required upstream yet not identity: what a user gets when the field is
 * unreadable. A user without readable sources is still a user, with none.
 */
const USER_FALLBACKS: Readonly<Record<string, unknown>> = { connected_sources: [] };

/** `prefix` goes before the paths of an identity failure (`users[37]`); warnings are relative to the record. */
export function parseUser(raw: unknown, prefix = ''): UserParse {
  // Nearly every record is valid: one parse, no walk.
  const whole = UserSchema.safeParse(raw);
  if (whole.success) return { ok: true, user: whole.data, warnings: [] };
  const identity = UserIdentitySchema.safeParse(raw);
  if (!identity.success) return { ok: false, issues: formatIssues(identity.error.issues, prefix) };
  const warnings: FieldWarning[] = [];
  const cleaned = cleanObject(UserSchema, identity.data, [], warnings, USER_FALLBACKS);
  if (!cleaned.ok) return { ok: false, issues: `${formatPath(cleaned.path, prefix)}: ${cleaned.message}` };
  return { ok: true, user: cleaned.value, warnings: mergeByField(warnings) };
}

function clean(schema: z.ZodType, value: unknown, path: Path, warnings: FieldWarning[]): Outcome<unknown> {
  const direct = schema.safeParse(value);
  if (direct.success) return { ok: true, value: direct.data };
  const inner = unwrap(schema);
  if (inner instanceof z.ZodObject && isRecord(value)) return cleanObject(inner, value, path, warnings);
  if (inner instanceof z.ZodArray && Array.isArray(value)) {
    return { ok: true, value: cleanArray(inner.element as z.ZodType, value, path, warnings) };
  }
  return failure(direct.error, path);
}

function cleanObject<S extends z.ZodObject>(
  schema: S,
  value: Record<string, unknown>,
  path: Path,
  warnings: FieldWarning[],
  fallbacks: Readonly<Record<string, unknown>> = {},
): Outcome<z.output<S>> {
  const out: Record<string, unknown> = { ...value };
  // The rule misreads a generic ZodObject's shape: without the assertion the entries are `any`.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion
  for (const [key, fieldSchema] of Object.entries(schema.shape as Record<string, z.ZodType>)) {
    const at = [...path, key];
    const field = clean(fieldSchema, value[key], at, warnings);
    if (field.ok) {
      if (field.value === undefined) delete out[key];
      else out[key] = field.value;
      continue;
    }
    const replaceable = Object.hasOwn(fallbacks, key);
    if (!replaceable && !fieldSchema.safeParse(undefined).success) return field;
    warnings.push(warningFor(field, at));
    if (replaceable) out[key] = fallbacks[key];
    else delete out[key];
  }
  // Object-level rules (a connected source needs `provider` or `source`) apply to what is left.
  const whole = schema.safeParse(out);
  return whole.success ? { ok: true, value: whole.data } : failure(whole.error, path);
}

function cleanArray(element: z.ZodType, items: readonly unknown[], path: Path, warnings: FieldWarning[]): unknown[] {
  const out: unknown[] = [];
  items.forEach((item, i) => {
    const at = [...path, i];
    const parsed = clean(element, item, at, warnings);
    if (parsed.ok) out.push(parsed.value);
    else warnings.push(warningFor(parsed, at));
  });
  return out;
}

function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  while (s instanceof z.ZodOptional || s instanceof z.ZodNullable) s = s.unwrap() as z.ZodType;
  return s;
}

function failure(error: z.ZodError, path: Path): Outcome<never> {
  const issue = error.issues[0];
  return { ok: false, path: [...path, ...(issue?.path ?? [])], message: issue?.message ?? 'invalid', code: issue?.code };
}

function warningFor(failed: { path: Path; message: string; code: string | undefined }, dropped: Path): FieldWarning {
  const field = formatPath(failed.path);
  const wider = failed.path.length > dropped.length ? ` (${formatPath(dropped)} dropped)` : '';
  return { field, problem: `${failed.message}${wider}`, rule: ruleOfIssueCode(failed.code) };
}

/**
 * One warning per field (the mirror keys them so): a source that lost its `provider` and has no `source` says both.
 * The first rule broken names the warning's rule.
 */
function mergeByField(warnings: readonly FieldWarning[]): FieldWarning[] {
  const byField = new Map<string, FieldWarning>();
  for (const w of warnings) {
    const before = byField.get(w.field);
    byField.set(w.field, before === undefined ? { ...w } : { ...before, problem: `${before.problem}; ${w.problem}` });
  }
  return [...byField.values()];
}

/** One list-page record parsed: a user and its field warnings, or the reason it is not a user. */
export type ParsedRecord =
  { ok: true; index: number; user: User; warnings: FieldWarning[] } | { ok: false; index: number; reason: string; raw: unknown };

/**
 * One record of a list page, the `index`-th: the sync calls it record by
 * record (src/sync/page-decode.ts), so that a bad record is reported with
 * its path (`users[37].user_id`) instead of failing the page. Only a record
 * without a valid identity is bad; other fields that break their rule
 * become field warnings (parseUser, above). Pure: no I/O.
 */
export function parseUserRecord(raw: unknown, index: number): ParsedRecord {
  const parsed = parseUser(raw, `users[${index}]`);
  if (parsed.ok) return { ok: true, index, user: parsed.user, warnings: parsed.warnings };
  return { ok: false, index, reason: parsed.issues, raw };
}

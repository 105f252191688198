/**
 * A field policy: which personal fields of a change event leave the host.
 * Pure (zod and node:crypto only, the key's bytes handed in by the caller),
 * so the sinks and the Parquet export apply the one rule the same way.
 *
 * - `fields`: an allow-list (`{ "allow": [...] }`, only these top-level
 *   fields of `user` leave) or a drop-list (`{ "drop": [...] }`, all but
 *   these). An allow-list is the safe choice: a field the service adds later
 *   stays home until it is named. Absent: every field leaves.
 * - `client_user_id`: `pass` (as it is), `drop` (removed from `data` and
 *   from `user`), or `hmac`: replaced, in both places, by
 *   HMAC-SHA256(key, client_user_id) as 64 lower-case hex digits, so a
 *   consumer holding the key (or a table of the values) can still join on
 *   it. Hex, not base64url: it is what SQL's and every shell's sha256 tools
 *   print, so a join key is computed the same way on the other side.
 * - Field names that left are removed from `changed_fields` and `previous`
 *   too (that a birth date changed is itself a fact about the person), and
 *   `sources_added`/`sources_removed` are emptied when `connected_sources`
 *   does not leave.
 *
 * The compiled policy is identified by `id` = `<name>:<fingerprint>`, stated
 * in every delivered event's headers (or file metadata). The fingerprint
 * hashes the rule and a key id (an HMAC of a fixed label under the key), so
 * it changes when the rule or the key changes and says nothing of the key.
 */
import { createHash, createHmac } from 'node:crypto';
import { z } from 'zod';

/** The smallest HMAC key taken: SHA-256's block output size, below which a key is guessable in principle. */
const HMAC_KEY_MIN_BYTES = 32;

const fieldName = z.string().min(1).max(128);
const fieldList = z
  .array(fieldName)
  .refine((list) => new Set(list).size === list.length, 'names a field twice')
  .refine((list) => !list.includes('client_user_id'), 'names client_user_id: set it with the client_user_id option');

/** A field policy as written in the sinks file (or the export's options). */
export const FieldPolicySchema = z
  .strictObject({
    name: z
      .string()
      .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be 1-64 of a-z, 0-9, _ and -, starting with a letter or digit')
      .optional()
      .describe('A name for the policy, stated with its fingerprint in every delivered event'),
    fields: z
      .union([z.strictObject({ allow: fieldList }), z.strictObject({ drop: fieldList })], {
        error: 'must be { "allow": [names] } or { "drop": [names] }',
      })
      .optional()
      .describe('Top-level fields of `user` that leave (allow) or stay home (drop); absent: all leave'),
    client_user_id: z.enum(['pass', 'drop', 'hmac']).default('pass'),
    hmac_key_file: z
      .string()
      .min(1)
      .optional()
      .describe('File holding the HMAC key (at least 32 bytes); required with client_user_id "hmac"'),
  })
  .superRefine((p, ctx) => {
    if (p.client_user_id === 'hmac' && p.hmac_key_file === undefined)
      ctx.addIssue({ code: 'custom', path: ['hmac_key_file'], message: 'is required when client_user_id is "hmac"' });
    if (p.client_user_id !== 'hmac' && p.hmac_key_file !== undefined)
      ctx.addIssue({ code: 'custom', path: ['hmac_key_file'], message: 'is only read when client_user_id is "hmac"' });
  });
export type FieldPolicySpec = z.input<typeof FieldPolicySchema>;

/** A policy ready to apply. */
export interface FieldPolicy {
  /** `<name>:<fingerprint>`: what delivered events state. */
  readonly id: string;
  readonly name: string;
  readonly fingerprint: string;
  /** True when the policy changes nothing: events leave as the mirror holds them. */
  readonly passesAll: boolean;
  /** The event (its JSON text) as it may leave. */
  applyToEvent(json: string): string;
  /** A user record as it may leave (a copy; the argument is not changed). */
  applyToUser(user: Readonly<Record<string, unknown>>): Record<string, unknown>;
  /** The client_user_id as it may leave, or undefined when it does not. */
  clientUserId(id: string): string | undefined;
  /** Whether a top-level field of `user` leaves. */
  keeps(field: string): boolean;
}

/** The key's bytes as a key file holds them: one trailing line end ignored (a file written by `echo`). */
export function hmacKeyFromFile(bytes: Uint8Array): Buffer {
  let end = bytes.length;
  if (end > 0 && bytes[end - 1] === 0x0a) end--;
  if (end > 0 && bytes[end - 1] === 0x0d) end--;
  return Buffer.from(bytes.subarray(0, end));
}

/**
 * Compiles a validated policy. `readKeyFile` is called once, with
 * `hmac_key_file`, when the policy hashes; a key shorter than
 * HMAC_KEY_MIN_BYTES is refused (the error names the file, never its bytes).
 */
export function compileFieldPolicy(
  input: FieldPolicySpec | undefined,
  readKeyFile: (path: string) => Uint8Array = () => {
    throw new Error('no key reader given');
  },
): FieldPolicy {
  const spec = FieldPolicySchema.parse(input ?? {});
  let key: Buffer | undefined;
  if (spec.client_user_id === 'hmac') {
    const path = spec.hmac_key_file ?? '';
    key = hmacKeyFromFile(readKeyFile(path));
    if (key.length < HMAC_KEY_MIN_BYTES)
      throw new Error(`hmac_key_file ${path}: the key is ${key.length} bytes; at least ${HMAC_KEY_MIN_BYTES} are needed`);
  }
  const allow = spec.fields !== undefined && 'allow' in spec.fields ? new Set(spec.fields.allow) : undefined;
  const drop = spec.fields !== undefined && 'drop' in spec.fields ? new Set(spec.fields.drop) : undefined;
  const mode = spec.client_user_id;
  const passesAll = allow === undefined && (drop === undefined || drop.size === 0) && mode === 'pass';

  const keyId = key === undefined ? null : createHmac('sha256', key).update('user-mirror field-policy key id').digest('hex').slice(0, 16);
  const rule = {
    v: 1,
    allow: allow === undefined ? null : [...allow].sort(),
    drop: drop === undefined ? null : [...drop].sort(),
    client_user_id: mode,
    key_id: keyId,
  };
  const fingerprint = createHash('sha256').update(JSON.stringify(rule)).digest('hex').slice(0, 16);
  const name = spec.name ?? (passesAll ? 'pass' : 'custom');

  const keeps = (field: string): boolean => {
    // Governed by its own option alone: the lists may not name it.
    if (field === 'client_user_id') return mode !== 'drop';
    if (allow !== undefined) return allow.has(field);
    return drop === undefined || !drop.has(field);
  };
  const clientUserId = (id: string): string | undefined => {
    if (mode === 'pass') return id;
    if (mode === 'drop' || key === undefined) return undefined;
    return createHmac('sha256', key).update(id, 'utf8').digest('hex');
  };
  const applyToUser = (user: Readonly<Record<string, unknown>>): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(user)) {
      if (k === 'client_user_id') {
        const mapped = typeof v === 'string' ? clientUserId(v) : mode === 'pass' ? v : undefined;
        if (mapped !== undefined) out[k] = mapped;
      } else if (keeps(k)) out[k] = v;
    }
    return out;
  };
  const applyToEvent = (json: string): string => {
    if (passesAll) return json;
    const event: unknown = JSON.parse(json);
    if (!isObject(event) || !isObject(event['data'])) return json;
    const data = event['data'];
    if (!('user_id' in data)) return json; // mirror.* events carry no user
    if (typeof data['client_user_id'] === 'string') {
      const mapped = clientUserId(data['client_user_id']);
      if (mapped === undefined) delete data['client_user_id'];
      else data['client_user_id'] = mapped;
    }
    if (isObject(data['user'])) data['user'] = applyToUser(data['user']);
    if (Array.isArray(data['changed_fields']))
      data['changed_fields'] = data['changed_fields'].filter((f) => typeof f === 'string' && keeps(f));
    if (isObject(data['previous'])) data['previous'] = applyToUser(data['previous']);
    if (!keeps('connected_sources')) {
      if (Array.isArray(data['sources_added'])) data['sources_added'] = [];
      if (Array.isArray(data['sources_removed'])) data['sources_removed'] = [];
    }
    return JSON.stringify(event);
  };

  return { id: `${name}:${fingerprint}`, name, fingerprint, passesAll, applyToEvent, applyToUser, clientUserId, keeps };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * User number `index` of a seeded directory, derived on demand. Nothing here
 * is stored: the same (seed, index) always yields the same record, which is
 * how a million-user directory fits in a few kilobytes.
 *
 * The record is written straight as JSON text, because serving pages is the
 * hot path; objects for programmatic use are parsed from that text, so the
 * two can never disagree. (Building objects with optional keys turned out
 * three times slower than the text: the varying shapes defeat V8's caches.)
 *
 * By default every record has today's shape, per docs/service-notes.md and
 * the official SDK's response schema: `created_on`, both `provider` and
 * `source` on every connected source (their logos sometimes differ),
 * `fallback_time_zone` as an object or null, `fallback_birth_date` and
 * `ingestion_*` null or absent, and both date-time spellings. Older and odd
 * shapes (the quirk bits, drawQuirks) appear only in the share of records
 * the directory asks for as legacy.
 */
import {
  anyDateTime,
  AWKWARD_ID_SUFFIXES,
  DAY_MS,
  isoDate,
  isoNaive,
  legacySourceLogo,
  providerLogo,
  PROVIDERS,
  TIME_ZONES,
} from './catalog.js';
import { fmix32, hash32, hex8, Prng, randomUuid, seedKey, unfmix32, uuidFromWords } from './random.js';

type WireSource = { name: string; slug: string; logo: string };
/** Today's shape has all three keys; only legacy records drop `provider` or both descriptors. */
type WireConnectedSource = { created_on: string; provider?: WireSource; source?: WireSource };
type WireTimeZone = { id: string; source_slug: string; updated_at: string };
type WireBirthDate = { value: string; source_slug: string; updated_at: string };
export type GeneratedUser = {
  user_id: string;
  team_id: string;
  client_user_id: string;
  created_on?: string;
  connected_sources: WireConnectedSource[];
  fallback_time_zone?: WireTimeZone | null;
  fallback_birth_date?: WireBirthDate | null;
  ingestion_start?: string | null;
  ingestion_end?: string | null;
};

/** Per-directory constants, computed once per directory instead of once per user. */
export interface UserKeys {
  readonly idKey: number;
  readonly clientKey: number;
  readonly fieldKey: number;
  readonly awkwardKey: number;
  readonly legacyKey: number;
  /** User i is legacy when hash32(legacyKey, i) is below this; 0 means none is. */
  readonly legacyBelow: number;
  readonly teamId: string;
  /**
   * 00:00 UTC of the day the directory's dates end at: users were created
   * over the CREATED_SPAN_DAYS before it, and no generated time is later, so
   * nothing lies in the future of a run, and "last week" queries find users.
   * Dates are relative to it, so a (seed, user) is the same all day long.
   */
  readonly today: number;
}

/** Generated users were created over the five years before `today`... */
const CREATED_SPAN_DAYS = 5 * 365;
/** ...legacy ones in the oldest 30% of that: older shapes belong to older records. */
const LEGACY_SPAN_DAYS = Math.round(CREATED_SPAN_DAYS * 0.3);
const AWKWARD_ONE_IN = 500;
const CLIENT_ID = /^cu_([0-9a-f]{8})/;
/** `cu_` + 8 hex digits: nothing in it needs JSON escaping. */
const PLAIN_CLIENT_ID_LENGTH = 11;
/** Weights of 0, 1, 2, 3 and 4 connected sources. */
const SOURCE_COUNT_CDF = [0.15, 0.5, 0.8, 0.95, 1];

/** Descriptor JSON per provider, rendered once: the provider, `source` with the old logo, and that with an empty slug. */
const DESCRIPTORS = PROVIDERS.map((p) => ({
  slug: p.slug,
  provider: JSON.stringify({ name: p.name, slug: p.slug, logo: providerLogo(p.slug) }),
  legacySource: JSON.stringify({ name: p.name, slug: p.slug, logo: legacySourceLogo(p.slug) }),
  emptySlugSource: JSON.stringify({ name: p.name, slug: '', logo: legacySourceLogo(p.slug) }),
}));
/** What the SDK's own wire tests put in these fields. */
const PLACEHOLDER_BOUNDS = ',"ingestion_start":"ingestion_start","ingestion_end":"ingestion_end"';

type Presence = 'value' | 'null' | 'absent';

/**
 * `legacyRecords`: the share (0..1) of users served in an older or odd shape.
 * `today`: any time of the day the dates end at; default the current UTC day.
 */
export function userKeys(seed: number, legacyRecords = 0, today: Date | number = Date.now()): UserKeys {
  const key = seedKey(seed);
  return {
    idKey: hash32(key, 11),
    clientKey: hash32(key, 12),
    fieldKey: hash32(key, 13),
    awkwardKey: hash32(key, 14),
    legacyKey: hash32(key, 16),
    legacyBelow: legacyBound(legacyRecords),
    teamId: randomUuid(new Prng(key, 15)),
    today: startOfUtcDay(today),
  };
}

/** 00:00 UTC of the day `at` falls on. */
export function startOfUtcDay(at: Date | number): number {
  const ms = typeof at === 'number' ? at : at.getTime();
  if (!Number.isFinite(ms)) throw new RangeError('today must be a valid date');
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

export function generateUser(keys: UserKeys, index: number): GeneratedUser {
  return JSON.parse(generateUserJson(keys, index)) as GeneratedUser;
}

/** Keys in the live service's order; an absent field is left out, not written as null. */
export function generateUserJson(keys: UserKeys, index: number): string {
  const prng = new Prng(keys.fieldKey, index);
  const userId = drawUserId(keys, index, prng);
  const quirks = legacyQuirks(keys, index);
  const firstMs = keys.today - CREATED_SPAN_DAYS * DAY_MS;
  const createdMs = firstMs + Math.floor(prng.float() * (quirks === 0 ? CREATED_SPAN_DAYS : LEGACY_SPAN_DAYS) * DAY_MS);
  const slugs: string[] = [];
  const dated = { createdMs, latestMs: keys.today };
  const sources = connectedSources(prng, dated, slugs, quirks);
  const clientId = clientUserIdFor(keys, index);
  const clientJson = clientId.length === PLAIN_CLIENT_ID_LENGTH ? `"${clientId}"` : JSON.stringify(clientId);
  let out = `{"user_id":"${userId}","team_id":"${keys.teamId}","client_user_id":${clientJson}`;
  out += createdOn(prng, createdMs, quirks);
  out += `,"connected_sources":[${sources}]`;
  out += (quirks & NO_TIME_ZONE) !== 0 ? '' : fallbackTimeZone(prng, dated, slugs);
  out += fallbackBirthDate(prng, dated, slugs);
  return `${out}${(quirks & PLACEHOLDER_INGESTION) !== 0 ? PLACEHOLDER_BOUNDS : ingestionBounds(prng, createdMs)}}`;
}

/** 0 for a record in today's shape; otherwise the legacy quirks it shows. */
function legacyQuirks(keys: UserKeys, index: number): number {
  if (keys.legacyBelow === 0 || hash32(keys.legacyKey, index) >= keys.legacyBelow) return 0;
  return drawQuirks(new Prng(keys.legacyKey, index));
}

function createdOn(prng: Prng, createdMs: number, quirks: number): string {
  if ((quirks & NO_CREATED_ON) !== 0) return '';
  return `,"created_on":"${(quirks & NAIVE_CREATED_ON) !== 0 ? isoNaive(createdMs) : anyDateTime(prng, createdMs)}"`;
}

/** Just the user_id of user `index`: cheap, for lookups that must not build the record. */
export function userIdFor(keys: UserKeys, index: number): string {
  return drawUserId(keys, index, new Prng(keys.fieldKey, index));
}

/** Word 0 is a bijection of the index (unique, invertible); the rest is random. */
function drawUserId(keys: UserKeys, index: number, prng: Prng): string {
  return uuidFromWords(fmix32((index + keys.idKey) >>> 0), prng.nextUint32(), prng.nextUint32(), prng.nextUint32());
}

export function clientUserIdFor(keys: UserKeys, index: number): string {
  const id = `cu_${hex8(fmix32((index + keys.clientKey) >>> 0))}`;
  const awkward = hash32(keys.awkwardKey, index);
  if (awkward % AWKWARD_ONE_IN !== 0) return id;
  return id + (AWKWARD_ID_SUFFIXES[(awkward >>> 16) % AWKWARD_ID_SUFFIXES.length] ?? '');
}

/** The generator index a user_id was made from, if it could be one of ours. */
export function indexFromUserId(keys: UserKeys, userId: string): number | undefined {
  return invertWord(userId.slice(0, 8), keys.idKey);
}

export function indexFromClientUserId(keys: UserKeys, clientUserId: string): number | undefined {
  const hex = CLIENT_ID.exec(clientUserId)?.[1];
  return hex === undefined ? undefined : invertWord(hex, keys.clientKey);
}

function invertWord(hex: string, key: number): number | undefined {
  if (!/^[0-9a-f]{8}$/.test(hex)) return undefined;
  return (unfmix32(Number.parseInt(hex, 16)) - key) >>> 0;
}

/** JSON of the array items; pushes the chosen slugs onto `slugs`. */
function connectedSources(prng: Prng, dated: Dated, slugs: string[], quirks: number): string {
  const drawn = sourceCount(prng.float());
  const count = drawn === 0 && (quirks & NEEDS_A_SOURCE) !== 0 ? 1 : drawn;
  let used = 0; // bit set of provider positions; the catalog has fewer than 32
  let out = '';
  while (slugs.length < count) {
    const at = prng.int(0, DESCRIPTORS.length - 1);
    const d = DESCRIPTORS[at];
    if (d === undefined || (used & (1 << at)) !== 0) continue;
    used |= 1 << at;
    const first = slugs.push(d.slug) === 1;
    const source = first && (quirks & EMPTY_SLUG) !== 0 ? d.emptySlugSource : prng.chance(0.3) ? d.legacySource : d.provider;
    const provider = (quirks & SOURCE_ONLY) !== 0 ? '' : `"provider":${d.provider},`;
    out += `${out === '' ? '' : ','}{"created_on":"${anyDateTime(prng, later(prng, dated, 400))}",${provider}"source":${source}}`;
  }
  if ((quirks & BARE_SOURCE) !== 0) out += `${out === '' ? '' : ','}{"created_on":"${anyDateTime(prng, later(prng, dated, 400))}"}`;
  return out;
}

/** When a user was created, and the latest time any of its dates may show. */
interface Dated {
  createdMs: number;
  latestMs: number;
}

/**
 * A time up to `maxDays` after creation but before `latestMs`: drawn within
 * the room left, not clamped, so recent users' dates do not pile up on the
 * last instant.
 */
function later(prng: Prng, dated: Dated, maxDays: number): number {
  const room = Math.max(0, Math.min(maxDays * DAY_MS, dated.latestMs - 1 - dated.createdMs));
  return dated.createdMs + Math.floor(prng.float() * room);
}

function sourceCount(r: number): number {
  const at = SOURCE_COUNT_CDF.findIndex((p) => r < p);
  return at === -1 ? SOURCE_COUNT_CDF.length - 1 : at;
}

function presence(prng: Prng, pNull: number, pAbsent: number): Presence {
  const r = prng.float();
  if (r < pNull) return 'null';
  return r < pNull + pAbsent ? 'absent' : 'value';
}

function sourceSlug(prng: Prng, slugs: readonly string[]): string {
  return slugs.length === 0 || prng.chance(0.25) ? 'manual' : prng.pick(slugs);
}

/** Always present, as an object or null: the live service sends the key on every current record. */
function fallbackTimeZone(prng: Prng, dated: Dated, slugs: readonly string[]): string {
  if (prng.chance(0.15)) return ',"fallback_time_zone":null';
  const updatedAt = anyDateTime(prng, later(prng, dated, 500));
  return `,"fallback_time_zone":{"id":"${prng.pick(TIME_ZONES)}","source_slug":"${sourceSlug(prng, slugs)}","updated_at":"${updatedAt}"}`;
}

function fallbackBirthDate(prng: Prng, dated: Dated, slugs: readonly string[]): string {
  const state = presence(prng, 0.3, 0.35);
  if (state !== 'value') return state === 'null' ? ',"fallback_birth_date":null' : '';
  const born = isoDate(Date.UTC(1940, 0, 1) + prng.int(0, 68 * 365) * DAY_MS);
  const updatedAt = anyDateTime(prng, later(prng, dated, 300));
  return `,"fallback_birth_date":{"value":"${born}","source_slug":"${sourceSlug(prng, slugs)}","updated_at":"${updatedAt}"}`;
}

function ingestionBounds(prng: Prng, createdMs: number): string {
  const state = presence(prng, 0.3, 0.3);
  if (state !== 'value') return state === 'null' ? ',"ingestion_start":null,"ingestion_end":null' : '';
  const startMs = createdMs - prng.int(0, 365) * DAY_MS;
  const end = prng.chance(0.3) ? `"${isoDate(startMs + prng.int(1, 730) * DAY_MS)}"` : 'null';
  return `,"ingestion_start":"${isoDate(startMs)}","ingestion_end":${end}`;
}

/** Connected sources carry only the deprecated `source`, no `provider`. */
const SOURCE_ONLY = 1 << 0;
/** No top-level `created_on`. */
const NO_CREATED_ON = 1 << 1;
/** `fallback_time_zone` absent, not even null. */
const NO_TIME_ZONE = 1 << 2;
/** `ingestion_start` / `ingestion_end` hold placeholder text, as in the SDK's own wire tests. */
const PLACEHOLDER_INGESTION = 1 << 3;
/** The first connected source's `source` descriptor has `slug: ""`. */
const EMPTY_SLUG = 1 << 4;
/** Top-level `created_on` without an offset: `2021-03-04T05:06:07`. */
const NAIVE_CREATED_ON = 1 << 5;
/** One more connected source with neither `provider` nor `source`. */
const BARE_SOURCE = 1 << 6;

const QUIRK_COUNT = 7;
/** Quirks that only show on a record with at least one connected source. */
const NEEDS_A_SOURCE = SOURCE_ONLY | EMPTY_SLUG;
/** Besides its one guaranteed quirk, a legacy record shows each other one with this chance. */
const EXTRA_QUIRK_CHANCE = 0.15;

/**
 * Which older or odd shapes a legacy record shows. The live service sends
 * today's shape (what the official SDK requires); these come only when a
 * directory is asked for a share of legacy records, to exercise a client's
 * tolerance. Each quirk is a bit; a legacy record always shows at least one,
 * so "shows a quirk" and "is legacy" are the same thing to an observer.
 */
function drawQuirks(prng: Prng): number {
  const primary = 1 << prng.int(0, QUIRK_COUNT - 1);
  let quirks = primary;
  for (let bit = 1; bit < 1 << QUIRK_COUNT; bit <<= 1) if (prng.chance(EXTRA_QUIRK_CHANCE)) quirks |= bit;
  // An offset-less created_on needs a created_on: keep whichever was guaranteed.
  if ((quirks & NO_CREATED_ON) !== 0 && (quirks & NAIVE_CREATED_ON) !== 0) {
    quirks &= ~(primary === NAIVE_CREATED_ON ? NO_CREATED_ON : NAIVE_CREATED_ON);
  }
  return quirks;
}

/** The share as a uint32 bound: record i is legacy when its 32-bit hash falls below it. */
function legacyBound(share: number): number {
  if (!(share >= 0 && share <= 1)) throw new RangeError(`legacyRecords must be a share from 0 to 1, got ${share}`);
  return Math.round(share * 0x1_0000_0000);
}

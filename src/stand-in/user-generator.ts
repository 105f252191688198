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
 * The mix of shapes follows ../shared/spec/live-service-notes.md: both
 * `provider` and `source` on every connected source (their logos sometimes
 * differ), `fallback_*` and `ingestion_*` null or absent, older records
 * without a top-level `created_on`, and both date-time spellings.
 */
import { AWKWARD_ID_SUFFIXES, PROVIDERS, TIME_ZONES, legacySourceLogo, providerLogo } from './catalog.js';
import { Prng, fmix32, hash32, seedKey, unfmix32 } from './prng.js';
import { hex8, randomUuid, uuidFromWords } from './uuid.js';
import { DAY_MS, anyDateTime, isoDate } from './wire-dates.js';

export type WireSource = { name: string; slug: string; logo: string };
export type WireConnectedSource = { created_on: string; provider: WireSource; source: WireSource };
export type WireTimeZone = { id: string; source_slug: string; updated_at: string };
export type WireBirthDate = { value: string; source_slug: string; updated_at: string };
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

/** Per-seed constants, computed once per directory instead of once per user. */
export interface UserKeys {
  readonly idKey: number;
  readonly clientKey: number;
  readonly fieldKey: number;
  readonly awkwardKey: number;
  readonly teamId: string;
}

const FIRST_CREATED = Date.UTC(2021, 0, 1);
const LAST_CREATED = Date.UTC(2026, 0, 1);
/** No generated time is later than this, so nothing lies in the future of a test run. */
const LATEST = Date.UTC(2026, 1, 1);
/** Records created before this are "older": they may lack created_on and fallback_time_zone. */
const LEGACY_BEFORE = Date.UTC(2022, 5, 1);
const AWKWARD_ONE_IN = 500;
const CLIENT_ID = /^cu_([0-9a-f]{8})/;
/** `cu_` + 8 hex digits: nothing in it needs JSON escaping. */
const PLAIN_CLIENT_ID_LENGTH = 11;
/** Weights of 0, 1, 2, 3 and 4 connected sources. */
const SOURCE_COUNT_CDF = [0.15, 0.5, 0.8, 0.95, 1];

/** Descriptor JSON per provider, rendered once: [provider, source with the current logo, source with the old logo]. */
const DESCRIPTORS = PROVIDERS.map((p) => ({
  slug: p.slug,
  provider: JSON.stringify({ name: p.name, slug: p.slug, logo: providerLogo(p.slug) }),
  legacySource: JSON.stringify({ name: p.name, slug: p.slug, logo: legacySourceLogo(p.slug) }),
}));

type Presence = 'value' | 'null' | 'absent';

export function userKeys(seed: number): UserKeys {
  const key = seedKey(seed);
  return {
    idKey: hash32(key, 11),
    clientKey: hash32(key, 12),
    fieldKey: hash32(key, 13),
    awkwardKey: hash32(key, 14),
    teamId: randomUuid(new Prng(key, 15)),
  };
}

export function generateUser(keys: UserKeys, index: number): GeneratedUser {
  return JSON.parse(generateUserJson(keys, index)) as GeneratedUser;
}

/** Keys in the live service's order; an absent field is left out, not written as null. */
export function generateUserJson(keys: UserKeys, index: number): string {
  const prng = new Prng(keys.fieldKey, index);
  const userId = drawUserId(keys, index, prng);
  const createdMs = FIRST_CREATED + Math.floor(prng.float() * (LAST_CREATED - FIRST_CREATED));
  const legacy = createdMs < LEGACY_BEFORE;
  const slugs: string[] = [];
  const sources = connectedSources(prng, createdMs, slugs);
  const clientId = clientUserIdFor(keys, index);
  const clientJson = clientId.length === PLAIN_CLIENT_ID_LENGTH ? `"${clientId}"` : JSON.stringify(clientId);
  let out = `{"user_id":"${userId}","team_id":"${keys.teamId}","client_user_id":${clientJson}`;
  if (!(legacy && prng.chance(0.3))) out += `,"created_on":"${anyDateTime(prng, createdMs)}"`;
  out += `,"connected_sources":[${sources}]`;
  out += fallbackTimeZone(prng, createdMs, legacy, slugs);
  out += fallbackBirthDate(prng, createdMs, slugs);
  return `${out}${ingestionBounds(prng, createdMs)}}`;
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
function connectedSources(prng: Prng, createdMs: number, slugs: string[]): string {
  const count = sourceCount(prng.float());
  let used = 0; // bit set of provider positions; the catalog has fewer than 32
  let out = '';
  while (slugs.length < count) {
    const at = prng.int(0, DESCRIPTORS.length - 1);
    const d = DESCRIPTORS[at];
    if (d === undefined || (used & (1 << at)) !== 0) continue;
    used |= 1 << at;
    slugs.push(d.slug);
    const source = prng.chance(0.3) ? d.legacySource : d.provider;
    const connectedMs = Math.min(LATEST, createdMs + prng.int(0, 400) * DAY_MS + prng.int(0, DAY_MS));
    out += `${out === '' ? '' : ','}{"created_on":"${anyDateTime(prng, connectedMs)}","provider":${d.provider},"source":${source}}`;
  }
  return out;
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

function fallbackTimeZone(prng: Prng, createdMs: number, legacy: boolean, slugs: readonly string[]): string {
  const state = presence(prng, 0.15, legacy ? 0.35 : 0);
  if (state !== 'value') return state === 'null' ? ',"fallback_time_zone":null' : '';
  const updatedAt = anyDateTime(prng, Math.min(LATEST, createdMs + prng.int(0, 500) * DAY_MS));
  return `,"fallback_time_zone":{"id":"${prng.pick(TIME_ZONES)}","source_slug":"${sourceSlug(prng, slugs)}","updated_at":"${updatedAt}"}`;
}

function fallbackBirthDate(prng: Prng, createdMs: number, slugs: readonly string[]): string {
  const state = presence(prng, 0.3, 0.35);
  if (state !== 'value') return state === 'null' ? ',"fallback_birth_date":null' : '';
  const born = isoDate(Date.UTC(1940, 0, 1) + prng.int(0, 68 * 365) * DAY_MS);
  const updatedAt = anyDateTime(prng, Math.min(LATEST, createdMs + prng.int(0, 300) * DAY_MS));
  return `,"fallback_birth_date":{"value":"${born}","source_slug":"${sourceSlug(prng, slugs)}","updated_at":"${updatedAt}"}`;
}

function ingestionBounds(prng: Prng, createdMs: number): string {
  const state = presence(prng, 0.3, 0.3);
  if (state !== 'value') return state === 'null' ? ',"ingestion_start":null,"ingestion_end":null' : '';
  const startMs = createdMs - prng.int(0, 365) * DAY_MS;
  const end = prng.chance(0.3) ? `"${isoDate(startMs + prng.int(1, 730) * DAY_MS)}"` : 'null';
  return `,"ingestion_start":"${isoDate(startMs)}","ingestion_end":${end}`;
}

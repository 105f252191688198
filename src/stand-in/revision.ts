/**
 * What updating a user does to its record. A directory stores only how many
 * times each kind of change was applied to a user; the record is re-derived
 * from (record, index, revision), so an updated user costs a map entry and
 * two runs that update the same users serve the same JSON.
 *
 * Each change is always visible in the JSON (a mirror that missed an update
 * cannot match by accident) and keeps the record in the shape the live
 * service sends. Works on generated and file-loaded records alike.
 */
import { DAY_MS, isoSeconds, PROVIDERS, providerLogo, TIME_ZONES } from './catalog.js';
import { hash32, Prng } from './random.js';

export type JsonRecord = Record<string, unknown>;

/** The kinds of change an update makes; the wire names of what changes. */
export const CHANGES = ['fallback_time_zone', 'connected_sources'] as const;
export type Change = (typeof CHANGES)[number];

/** How many times each kind of change has been applied to one user. */
export interface Revision {
  fallback_time_zone: number;
  connected_sources: number;
}

export const UNREVISED: Readonly<Revision> = Object.freeze({ fallback_time_zone: 0, connected_sources: 0 });

export function bump(revision: Readonly<Revision>, change: Change): Revision {
  return { ...revision, [change]: revision[change] + 1 };
}

/**
 * Record `record` (user `index`) after `revision`. `todayMs` is the
 * directory's day: revision times fall on the day before it, so an updated
 * record never claims a time in the future of the run.
 */
export function reviseUser<T extends JsonRecord>(record: T, index: number, revision: Readonly<Revision>, todayMs: number): T {
  let out: T = record;
  if (revision.fallback_time_zone > 0) out = { ...out, fallback_time_zone: timeZoneAt(index, revision.fallback_time_zone, todayMs) };
  if (revision.connected_sources > 0) out = { ...out, connected_sources: sourcesAt(record, index, revision.connected_sources, todayMs) };
  return out;
}

/** Version v of a user's time zone; its `updated_at` moves with v, so consecutive versions always differ. */
function timeZoneAt(index: number, version: number, todayMs: number): JsonRecord {
  const prng = new Prng(0x5eed, index, version);
  return { id: prng.pick(TIME_ZONES), source_slug: 'manual', updated_at: revisionTime(index, version, todayMs) };
}

/**
 * Version v of a user's connected sources: odd versions connect one more
 * provider, even versions disconnect one of the original sources (or, for a
 * user without any, connect a different provider than the version before).
 * So consecutive versions always differ, adding and removing alike.
 */
function sourcesAt(record: JsonRecord, index: number, version: number, todayMs: number): unknown[] {
  const original = Array.isArray(record.connected_sources) ? (record.connected_sources as unknown[]) : [];
  if (version % 2 === 0 && original.length > 0) {
    const dropped = (version / 2) % original.length;
    return original.filter((_, at) => at !== dropped);
  }
  const present = new Set(original.map(slugOf));
  const free = PROVIDERS.filter((p) => !present.has(p.slug));
  const provider = free[(hash32(index, 0x50c) + version) % free.length];
  if (provider === undefined) return original;
  const descriptor = { name: provider.name, slug: provider.slug, logo: providerLogo(provider.slug) };
  return [...original, { created_on: revisionTime(index, version, todayMs), provider: descriptor, source: descriptor }];
}

function slugOf(source: unknown): unknown {
  if (typeof source !== 'object' || source === null) return undefined;
  const { provider, source: legacy } = source as { provider?: { slug?: unknown }; source?: { slug?: unknown } };
  return provider?.slug ?? legacy?.slug;
}

/** Version v dated v minutes into the day before `todayMs` (wrapping after a day's worth), seconds from the index. */
function revisionTime(index: number, version: number, todayMs: number): string {
  const minute = version % (DAY_MS / 60_000);
  return isoSeconds(todayMs - DAY_MS + minute * 60_000 + (index % 60) * 1000);
}

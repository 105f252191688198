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
import { isRecord } from '../runtime/is-record.js';

export type JsonRecord = Record<string, unknown>;

/** The kinds of change an update makes; the wire names of what changes. */
export const CHANGES = ['fallback_time_zone', 'connected_sources'] as const;
export type Change = (typeof CHANGES)[number];

/** Which way a connected-sources update goes. */
export const DIRECTIONS = ['connect', 'disconnect'] as const;
export type Direction = (typeof DIRECTIONS)[number];

/**
 * What was applied to one user: how many time-zone changes, and each
 * connected-sources step in order. Steps are cumulative: each applies to the
 * record as the steps before it left it, so a second update never undoes the first.
 */
export interface Revision {
  fallback_time_zone: number;
  connected_sources: readonly Direction[];
}

export const UNREVISED: Readonly<Revision> = Object.freeze({ fallback_time_zone: 0, connected_sources: Object.freeze([]) });

/**
 * `revision` with one more change. A connected-sources step takes `direction`
 * when given; otherwise it connects when the user has no source, disconnects
 * when every provider is connected, and alternates between the two
 * otherwise, so churn adds and removes alike. Throws a RangeError naming the problem
 * when the chosen direction cannot apply: nothing to disconnect, or every
 * provider already connected.
 */
export function bump(record: JsonRecord, index: number, revision: Readonly<Revision>, change: Change, direction?: Direction): Revision {
  if (change === 'fallback_time_zone') return { ...revision, fallback_time_zone: revision.fallback_time_zone + 1 };
  const current = sourcesAfter(record, index, revision.connected_sources, 0);
  const free = freeProviders(current).length;
  const chosen =
    direction ?? (current.length === 0 || (free > 0 && revision.connected_sources.length % 2 === 0) ? 'connect' : 'disconnect');
  if (chosen === 'disconnect' && current.length === 0) throw new RangeError('the user has no connected source to disconnect');
  if (chosen === 'connect' && free === 0) throw new RangeError('the user has every provider connected already');
  return { ...revision, connected_sources: [...revision.connected_sources, chosen] };
}

/**
 * Record `record` (user `index`) after `revision`. `todayMs` is the
 * directory's day: revision times fall on the day before it, so an updated
 * record never claims a time in the future of the run.
 */
export function reviseUser<T extends JsonRecord>(record: T, index: number, revision: Readonly<Revision>, todayMs: number): T {
  let out: T = record;
  if (revision.fallback_time_zone > 0) out = { ...out, fallback_time_zone: timeZoneAt(index, revision.fallback_time_zone, todayMs) };
  if (revision.connected_sources.length > 0)
    out = { ...out, connected_sources: sourcesAfter(record, index, revision.connected_sources, todayMs) };
  return out;
}

/** Version v of a user's time zone; its `updated_at` moves with v, so consecutive versions always differ. */
function timeZoneAt(index: number, version: number, todayMs: number): JsonRecord {
  const prng = new Prng(0x5eed, index, version);
  return { id: prng.pick(TIME_ZONES), source_slug: 'manual', updated_at: revisionTime(index, version, todayMs) };
}

/**
 * A user's connected sources after `steps`, each applied to the list the
 * steps before it left: step v (from 1) connects a provider not connected
 * now, or disconnects one connected now, both picked from (index, v). So
 * each step is visible, and steps accumulate.
 */
function sourcesAfter(record: JsonRecord, index: number, steps: readonly Direction[], todayMs: number): unknown[] {
  let sources = Array.isArray(record.connected_sources) ? (record.connected_sources as unknown[]) : [];
  steps.forEach((step, at) => {
    const version = at + 1;
    if (step === 'disconnect') {
      const dropped = (hash32(index, 0xd15) + version) % Math.max(sources.length, 1);
      sources = sources.filter((_, i) => i !== dropped);
      return;
    }
    const free = freeProviders(sources);
    const provider = free[(hash32(index, 0x50c) + version) % Math.max(free.length, 1)];
    if (provider === undefined) return;
    const descriptor = { name: provider.name, slug: provider.slug, logo: providerLogo(provider.slug) };
    sources = [...sources, { created_on: revisionTime(index, version, todayMs), provider: descriptor, source: descriptor }];
  });
  return sources;
}

function freeProviders(sources: readonly unknown[]): typeof PROVIDERS {
  const present = new Set(sources.map(slugOf));
  return PROVIDERS.filter((p) => !present.has(p.slug));
}

function slugOf(source: unknown): unknown {
  if (!isRecord(source)) return undefined;
  const { provider, source: legacy } = source as { provider?: { slug?: unknown }; source?: { slug?: unknown } };
  return provider?.slug ?? legacy?.slug;
}

/** Version v dated v minutes into the day before `todayMs` (wrapping after a day's worth), seconds from the index. */
function revisionTime(index: number, version: number, todayMs: number): string {
  const minute = version % (DAY_MS / 60_000);
  return isoSeconds(todayMs - DAY_MS + minute * 60_000 + (index % 60) * 1000);
}

/**
 * What `directory.update()` does to a record: revision `version` of it. The
 * change is deterministic and always visible in the JSON (a new
 * `fallback_time_zone` whose `updated_at` moves with the version), so a
 * mirror that missed an update cannot match the directory by accident.
 * Works on generated and file-loaded records alike.
 */
import { TIME_ZONES } from './catalog.js';
import { Prng } from './prng.js';
import { isoSeconds } from './wire-dates.js';

export type JsonRecord = Record<string, unknown>;

const REVISION_EPOCH = Date.UTC(2026, 1, 1);
const HOUR_MS = 3_600_000;

export function reviseUser<T extends JsonRecord>(record: T, index: number, version: number): T {
  if (version <= 0) return record;
  const prng = new Prng(0x5eed, index, version);
  return {
    ...record,
    fallback_time_zone: {
      id: prng.pick(TIME_ZONES),
      source_slug: 'manual',
      updated_at: isoSeconds(REVISION_EPOCH + version * HOUR_MS + (index % 3600) * 1000),
    },
  };
}

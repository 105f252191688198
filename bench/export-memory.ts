/**
 * `npm run bench:export-memory -- --users 3000000`: the export's memory bound
 * without a mirror of that size. Builds users rows shaped as the mirror's
 * (a ~900-byte stand-in record, two sources, the same typed columns, each
 * row's ids its own) one at a time and streams them through the export's
 * own mapping and Parquet writer (src/export/tables.ts userRecord,
 * src/export/files.ts writeTableFile: row groups, zstd, the file read back
 * and checked), under the V8 and glibc settings `user-mirror export` runs
 * with (src/entry.ts). Prints the rows, seconds and peak RSS. What it leaves
 * out is SQLite's side, whose memory does not grow with the rows: statements
 * are iterated, and the page cache is SQLite's fixed cache_size.
 *
 * Goal (issue 53): peak RSS ≤ 200 MB at 3,000,000 users.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { UserRowOut } from '../db/user-row.js';
import { writeTableFile } from '../src/export/files.js';
import { COLUMNS, userRecord } from '../src/export/tables.js';

const { values } = parseArgs({ options: { users: { type: 'string', default: '3000000' } } });
const users = Number(values.users);
if (!Number.isSafeInteger(users) || users < 1) throw new Error(`--users: a whole number, not ${String(values.users)}`);

function* rows(n: number): Generator<UserRowOut> {
  for (let i = 0; i < n; i++) {
    const user_id = `f9b9f790-60f6-4f92-9f2a-${String(i).padStart(12, '0')}`;
    const client_user_id = `cu_${i.toString(16).padStart(8, '0')}`;
    const logo = (slug: string) => `https://assets.stand-in.invalid/providers/${slug}.png`;
    const source = (name: string, slug: string, at: string) => ({
      created_on: at,
      provider: { name, slug, logo: logo(slug) },
      source: { name, slug, logo: logo(slug) },
    });
    const raw = JSON.stringify({
      user_id,
      team_id: 'bda8b7d8-0206-474a-9ac0-69b5cc58c919',
      client_user_id,
      created_on: '2026-09-15T20:14:01.897063+00:00',
      connected_sources: [source('Omron', 'omron', '2026-11-16T21:49:04Z'), source('Google Fit', 'google_fit', '2026-11-14T14:43:32Z')],
      fallback_time_zone: { id: 'Africa/Johannesburg', source_slug: 'manual', updated_at: '2026-11-28T00:01:00Z' },
      ingestion_start: '2026-07-24',
      ingestion_end: null,
    });
    yield {
      user_id,
      team_id: 'bda8b7d8-0206-474a-9ac0-69b5cc58c919',
      client_user_id,
      created_on: '2026-09-15T20:14:01.897Z',
      fallback_time_zone_id: 'Africa/Johannesburg',
      fallback_time_zone_source_slug: 'manual',
      fallback_time_zone_updated_at: '2026-11-28T00:01:00.000Z',
      fallback_birth_date: null,
      fallback_birth_date_source_slug: null,
      fallback_birth_date_updated_at: null,
      ingestion_start: '2026-07-24',
      ingestion_end: null,
      raw,
      first_seen_at: '2026-11-29T06:05:13.247Z',
      last_seen_at: '2026-11-29T06:05:13.247Z',
      deleted_at: i % 200 === 0 ? '2026-11-29T06:05:13.247Z' : null,
      sources: `google_fit\u001fomron`,
    };
  }
}

function* records(n: number) {
  for (const r of rows(n)) yield userRecord(r);
}

const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-export-memory-'));
try {
  const started = performance.now();
  const file = await writeTableFile(dir, 'users', 'users.parquet', 'parquet', COLUMNS.users, records(users));
  const s = (performance.now() - started) / 1000;
  const peakMb = process.resourceUsage().maxRSS / 1024;
  console.log(
    `\nbench:export-memory: ${file.rows.toLocaleString('en')} users rows, ${(file.bytes / 1_048_576).toFixed(0)} MB of Parquet, ` +
      `${s.toFixed(1)} s, peak RSS ${peakMb.toFixed(0)} MB (goal ≤ 200 MB: ${peakMb <= 200 ? 'met' : 'not met'})`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}

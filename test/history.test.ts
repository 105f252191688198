/**
 * History against the stand-in: users created, updated, given and deprived
 * of sources, deleted and restored over several runs; after each run the
 * time and what the stand-in served are noted. Every as-of answer (the
 * reader the CLI uses, for every user at every noted time; the CLI itself
 * for a few; the documented SQL) must equal what the stand-in served then,
 * and a time before history began must be "unknown" (exit 2), never "no".
 * A kill -9 during a run that changes history: test/mirror-crash.test.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMirror, type Db } from '../db/open.js';
import { HistoryReader } from '../db/history-reader.js';
import { purgeHistory } from '../db/purge.js';
import { migrate } from '../db/migrate.js';
import { MIGRATIONS } from '../db/migrations.js';
import { createSyncRig, type SyncRig } from './support/sync-rig.js';
import { requireBuiltCli, runCli } from './support/cli-process.js';
import { ROOT } from './support/mirror-fixtures.js';

type Record_ = Record<string, unknown>;

/** What the stand-in served after a run, by client_user_id, and a time between that run and the next. */
interface Moment {
  at: string;
  served: Map<string, Record_>;
}

function slugsOf(record: Record_): string[] {
  const sources = Array.isArray(record.connected_sources) ? (record.connected_sources as Record_[]) : [];
  return sources
    .map((s) => ((s.provider ?? s.source) as Record_ | undefined)?.slug)
    .filter((s): s is string => typeof s === 'string')
    .sort();
}

const tick = () => new Promise((r) => setTimeout(r, 5));

let rig: SyncRig;
let db: Db;
const moments: Moment[] = [];
let beforeHistory: string;
const ids: Record<'updated' | 'reconnected' | 'deleted' | 'restored' | 'untouched', string> = {
  updated: '',
  reconnected: '',
  deleted: '',
  restored: '',
  untouched: '',
};
let added: string[] = [];

async function runAndNote(): Promise<void> {
  expect((await rig.sync()).status).toBe('succeeded');
  await tick();
  const served = new Map<string, Record_>();
  for (const r of rig.standIn.directory.records()) served.set(String(r.client_user_id), JSON.parse(JSON.stringify(r)) as Record_);
  moments.push({ at: new Date().toISOString(), served });
  await tick();
}

beforeAll(async () => {
  requireBuiltCli();
  rig = await createSyncRig({ users: 40 });
  beforeHistory = new Date().toISOString();
  await tick();
  await runAndNote();
  const d = rig.standIn.directory;
  const listed = d.page(0, 40);
  const pick = (i: number) => String(listed[i]?.user_id);
  const client = (i: number) => String(listed[i]?.client_user_id);
  [ids.updated, ids.reconnected, ids.deleted, ids.restored, ids.untouched] = [client(1), client(2), client(3), client(4), client(5)];
  // Run 2: a time zone changes, a source connects, a user goes, one comes.
  d.update(pick(1), 'fallback_time_zone');
  d.update(pick(2), 'connected_sources');
  d.delete([pick(3), pick(4)]);
  added = d.add(1).map((id) => String(d.get(id)?.client_user_id));
  await runAndNote();
  // Run 3: the source goes again (and one of the originals), a deleted user comes back.
  d.update(pick(2), 'connected_sources');
  d.restore([pick(4)]);
  d.update(pick(1), 'connected_sources');
  await runAndNote();
  // Run 4: nothing changes upstream: history must not move.
  await runAndNote();
  db = openMirror(rig.dbPath, { readonly: true });
});

afterAll(async () => {
  db?.close();
  await rig?.close();
});

/** Migration 13's columns, dropped to make a mirror of version 8 again. */
const DROP_RUN_SOURCE = ['source_run_id', 'source_published_at', 'source_at', 'source_epoch', 'source_restored_at', 'source_cursor']
  .map((c) => `ALTER TABLE sync_runs DROP COLUMN ${c};`)
  .join(' ');

describe('as of each noted time', () => {
  it('every user that ever existed is found exactly when the stand-in served it, as it served it, with its sources then', () => {
    const reader = new HistoryReader(db);
    const everyone = new Set(moments.flatMap((m) => [...m.served.keys()]));
    for (const m of moments) {
      for (const client of everyone) {
        const answer = reader.asOf(client, m.at);
        const served = m.served.get(client);
        if (served === undefined) {
          expect(answer, `${client} at ${m.at}`).toEqual({ kind: 'absent' });
          continue;
        }
        expect(answer.kind, `${client} at ${m.at}`).toBe('found');
        if (answer.kind !== 'found') continue;
        expect(JSON.parse(answer.version.raw ?? 'null')).toEqual(served);
        expect(answer.sources.map((s) => s.slug)).toEqual(slugsOf(served));
      }
    }
  });

  it('the scenario did change something at every step but the last', () => {
    const json = (i: number, c: string) => JSON.stringify(moments[i]?.served.get(c) ?? null);
    expect(json(1, ids.updated)).not.toBe(json(0, ids.updated));
    expect(slugsOf(moments[1]?.served.get(ids.reconnected) ?? {})).not.toEqual(slugsOf(moments[0]?.served.get(ids.reconnected) ?? {}));
    expect(moments[1]?.served.has(ids.deleted)).toBe(false);
    expect(moments[2]?.served.has(ids.restored)).toBe(true);
    expect(moments[1]?.served.has(added[0] ?? '')).toBe(true);
    expect(json(3, ids.updated)).toBe(json(2, ids.updated));
  });

  it('the first sync is the baseline: a user no run changed since has no rows, and its one version and sources in the views', () => {
    const first = moments[0]?.served ?? new Map<string, Record_>();
    const unchanged = [...first.keys()].filter((c) =>
      moments.every((m) => JSON.stringify(m.served.get(c)) === JSON.stringify(first.get(c))),
    );
    expect(unchanged.length).toBeGreaterThan(30);
    expect(db.prepare(`SELECT count(*) FROM user_versions`).pluck().get()).toBeLessThan(15);
    for (const client of unchanged) {
      expect(db.prepare(`SELECT count(*) FROM user_versions WHERE client_user_id = ?`).pluck().get(client)).toBe(0);
      const views = db
        .prepare(`SELECT id, valid_from, valid_to, opened_run FROM user_history WHERE client_user_id = ?`)
        .all(client) as Array<Record<string, unknown>>;
      expect(views).toEqual([
        { id: null, valid_from: db.prepare(`SELECT baseline_at FROM history_state`).pluck().get(), valid_to: null, opened_run: 1 },
      ]);
    }
  });

  it('a run that changes nothing writes nothing', () => {
    const runs = db.prepare(`SELECT id FROM sync_runs ORDER BY id`).pluck().all() as number[];
    const last = runs.at(-1);
    expect(db.prepare(`SELECT count(*) FROM user_versions WHERE opened_run = ? OR closed_run = ?`).pluck().get(last, last)).toBe(0);
    expect(db.prepare(`SELECT count(*) FROM source_connections WHERE opened_run = ? OR closed_run = ?`).pluck().get(last, last)).toBe(0);
  });

  it('versions say how they ended; a deletion closes the sources with the user, a restore opens them again', () => {
    const deletedUser = db.prepare(`SELECT user_id FROM user_versions WHERE client_user_id = ?`).pluck().get(ids.deleted) as string;
    expect(db.prepare(`SELECT end_cause, ended_in_deletion FROM user_versions WHERE user_id = ?`).all(deletedUser)).toEqual([
      { end_cause: 'verified', ended_in_deletion: 1 },
    ]);
    const restoredUser = db.prepare(`SELECT user_id FROM user_versions WHERE client_user_id = ?`).pluck().get(ids.restored) as string;
    const ends = db.prepare(`SELECT ended_by FROM source_connections WHERE user_id = ? ORDER BY id`).pluck().all(restoredUser);
    expect(ends.filter((e) => e === 'user_deleted').length).toBeGreaterThan(0);
    expect(ends.filter((e) => e === null).length).toBe(ends.filter((e) => e === 'user_deleted').length);
  });
});

describe('before history began', () => {
  it('is unknown, not absent', () => {
    expect(new HistoryReader(db).asOf(ids.untouched, beforeHistory)).toEqual({
      kind: 'unknown',
      completeSince: db.prepare(`SELECT published_at FROM sync_runs ORDER BY id LIMIT 1`).pluck().get(),
    });
  });
});

describe('the CLI', () => {
  const env = () => rig.env();

  it('resolve --as-of prints the record as served then (exit 0), 3 for no user then, 2 before history', async () => {
    const [first, second] = moments;
    const then = await runCli(['resolve', ids.updated, '--as-of', String(first?.at), '--json'], env());
    expect(then.code).toBe(0);
    const line = JSON.parse(then.stdout) as { user: unknown; source: string; sources: Array<{ slug: string }> };
    expect(line.source).toBe('history');
    expect(line.user).toEqual(first?.served.get(ids.updated));
    expect(line.sources.map((s) => s.slug)).toEqual(slugsOf(first?.served.get(ids.updated) ?? {}));
    const text = await runCli(['resolve', ids.updated, '--as-of', String(second?.at)], env());
    expect(text.code).toBe(0);
    expect(JSON.parse(text.stdout)).toEqual(second?.served.get(ids.updated));
    const gone = await runCli(['resolve', ids.deleted, '--as-of', String(second?.at)], env());
    expect(gone.code).toBe(3);
    expect(gone.stderr).toContain('not found');
    const early = await runCli(['resolve', ids.untouched, '--as-of', beforeHistory], env());
    expect(early.code).toBe(2);
    expect(early.stderr).toMatch(/history begins at \d{4}-/);
    const bad = await runCli(['resolve', ids.untouched, '--as-of', 'last tuesday'], env());
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--as-of');
  });

  it('resolve --as-of compares instants, not text: a time in year 10000 (UTC) is refused by name, one in 9999 is answered', async () => {
    // 9999-12-31T23:00-02:00 is 10000-01-01T01:00Z: as text "+010000-…" sorted before every stored time.
    const beyond = await runCli(['resolve', ids.untouched, '--as-of', '9999-12-31T23:00-02:00'], env());
    expect(beyond.code).toBe(2);
    expect(beyond.stderr).toContain('--as-of: 9999-12-31T23:00-02:00 is in year 10000 in UTC');
    expect(beyond.stderr).not.toContain('history begins');
    const late = await runCli(['resolve', ids.untouched, '--as-of', '9999-12-31T21:00-02:00', '--json'], env());
    expect(late.code).toBe(0);
    expect((JSON.parse(late.stdout) as { as_of: string }).as_of).toBe('9999-12-31T23:00:00.000Z');
    // The same instant written with an offset gets the same answer as in UTC.
    const second = moments[1]?.at ?? '';
    const shifted = new Date(Date.parse(second) + 5.5 * 3_600_000).toISOString().replace('Z', '+05:30');
    const inUtc = await runCli(['resolve', ids.updated, '--as-of', second], env());
    const inOffset = await runCli(['resolve', ids.updated, '--as-of', shifted], env());
    expect(inOffset.code).toBe(0);
    expect(inOffset.stdout).toBe(inUtc.stdout);
    expect(() => new HistoryReader(db).asOf(ids.untouched, '+010000-01-01T01:00:00.000Z')).toThrow(RangeError);
  }, 60_000);

  it('a 10 KB id is echoed by its head and size, not whole', async () => {
    const long = `x${'y'.repeat(10 * 1024 - 1)}`;
    for (const argv of [
      ['resolve', long],
      ['history', long],
      ['resolve', long, '--as-of', new Date().toISOString()],
    ]) {
      const r = await runCli(argv, env());
      expect(r.code, argv[0]).toBe(3);
      expect(r.stderr).toContain(`"x${'y'.repeat(63)}"… (10240 bytes)`);
      expect(r.stderr.length).toBeLessThan(400);
    }
  }, 60_000);

  it('history lists the versions and connections of a restored user, and --json carries the records', async () => {
    const text = await runCli(['history', ids.restored], env());
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/deleted \(verified\)/);
    expect(text.stdout).toMatch(/user_deleted/);
    const json = await runCli(['history', ids.restored, '--json'], env());
    const out = JSON.parse(json.stdout) as { versions: Array<{ user: unknown; valid_to: string | null }>; connections: unknown[] };
    expect(out.versions).toHaveLength(2);
    expect(out.versions[0]?.user).toEqual(moments[0]?.served.get(ids.restored));
    expect(out.versions[1]?.valid_to).toBeNull();
    expect(out.connections.length).toBeGreaterThan(0);
    expect((await runCli(['history', 'nobody-ever'], env())).code).toBe(3);
  });
});

/** The statements of the ```sql blocks under `### heading` in docs/sql.md, comments and sqlite3 dot-commands (`.parameter set`) dropped. */
function recipes(heading: string): string[] {
  const text = readFileSync(join(ROOT, 'docs/sql.md'), 'utf8');
  const start = text.indexOf(`### ${heading}`);
  expect(start).toBeGreaterThan(-1);
  const end = text.indexOf('\n#', start + 1);
  const section = text.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/```sql\n([\s\S]*?)```/g)].flatMap((m) =>
    (m[1] ?? '')
      .replace(/--[^\n]*/g, '')
      .replace(/^\s*\.[^\n]*/gm, '')
      .split(';')
      .map((s) => s.trim())
      .filter((s) => s !== ''),
  );
}

describe('the history recipes in docs/sql.md', () => {
  const NOW = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`;
  const [perSource, perWeek, sourcesOfUser, monthly, disconnected] = recipes('History: who was a user, and with which sources');
  const at = (sql: string | undefined, time: string) => {
    expect(sql).toContain(NOW);
    return String(sql).replace(NOW, `'${time}'`);
  };

  it('active users per source on a date', () => {
    for (const m of moments) {
      const rows = db.prepare(at(perSource, m.at)).all() as Array<{ slug: string; active_users: number }>;
      const expected = new Map<string, number>();
      for (const r of m.served.values()) for (const slug of new Set(slugsOf(r))) expected.set(slug, (expected.get(slug) ?? 0) + 1);
      expect(new Map(rows.map((r) => [r.slug, r.active_users]))).toEqual(expected);
    }
  });

  it('connections and disconnections per source per week, counted from when history began', () => {
    const rows = db.prepare(String(perWeek)).all() as Array<{ connected: number; disconnected: number }>;
    const sum = (k: 'connected' | 'disconnected') => rows.reduce((n, r) => n + r[k], 0);
    // Run 2 connected one source; run 3 disconnected it and one of another user's; restores reconnect.
    const expectedConnected = db
      .prepare(`SELECT count(*) FROM source_history WHERE connected_at > (SELECT complete_since FROM history_state)`)
      .pluck()
      .get();
    expect(sum('connected')).toBe(expectedConnected);
    expect(sum('connected')).toBeGreaterThan(0);
    expect(sum('disconnected')).toBeGreaterThan(0);
  });

  it("a user's sources on a date", () => {
    for (const m of moments) {
      const sql = at(sourcesOfUser, m.at);
      expect(sql).toContain(':client_user_id');
      const rows = db.prepare(sql).all({ client_user_id: ids.reconnected }) as Array<{ slug: string }>;
      expect(rows.map((r) => r.slug).sort()).toEqual(slugsOf(m.served.get(ids.reconnected) ?? {}));
    }
  });

  it('monthly active users: everyone active at some time of this month', () => {
    const rows = db.prepare(String(monthly)).all() as Array<{ month: string; active_users: number }>;
    const everyone = new Set(moments.flatMap((m) => [...m.served.values()].map((r) => String(r.user_id))));
    expect(rows.at(-1)).toEqual({ month: new Date().toISOString().slice(0, 7), active_users: everyone.size });
  });

  it('who disconnected a source in the last week', () => {
    const rows = db.prepare(String(disconnected)).all() as Array<{ client_user_id: string; slug: string }>;
    expect(rows.map((r) => r.client_user_id)).toContain(ids.reconnected);
    expect(rows.every((r) => typeof r.slug === 'string')).toBe(true);
  });
});

describe('retention and upgrade', () => {
  it('HISTORY_RETENTION_DAYS drops what ended before the cutoff and moves the start of history past it', () => {
    const copy = join(rig.dir, 'retention.db');
    db.prepare(`VACUUM INTO ?`).run(copy);
    const w = openMirror(copy);
    try {
      const cutoff = moments[2]?.at ?? '';
      const ended = w.prepare(`SELECT count(*) FROM user_versions WHERE valid_to < ?`).pluck().get(cutoff) as number;
      expect(ended).toBeGreaterThan(0);
      expect(purgeHistory(w, cutoff)).toBeGreaterThanOrEqual(ended);
      const reader = new HistoryReader(w);
      expect(reader.completeSince()! >= (moments[1]?.at ?? '')).toBe(true);
      expect(reader.asOf(ids.updated, moments[0]?.at ?? '').kind).toBe('unknown');
      expect(reader.asOf(ids.updated, moments[3]?.at ?? '').kind).toBe('found');
    } finally {
      w.close();
    }
  });

  it('an existing mirror is upgraded in place: current versions from its change log, earlier ones from the feed, complete from then', () => {
    // The rig's mirror as version 8 had it: its history taken away, its version set back.
    db.prepare(`VACUUM INTO ?`).run(join(rig.dir, 'v9.db'));
    const up = openMirror(join(rig.dir, 'v9.db'));
    up.exec(
      `DROP VIEW user_history; DROP VIEW source_history; DROP TABLE user_versions; DROP TABLE source_connections; DROP TABLE history_state; DROP TABLE mirror_lineage; DROP TABLE identity_conflicts; DROP TABLE run_field_warnings; DROP TABLE schema_drift; ${DROP_RUN_SOURCE} PRAGMA user_version = 8;`,
    );
    const before = new Date().toISOString();
    migrate(up, MIGRATIONS);
    try {
      const reader = new HistoryReader(up);
      expect(reader.completeSince()! >= before).toBe(true);
      const last = moments.at(-1)!;
      for (const [client, served] of last.served) {
        const v = reader.asOf(client, new Date().toISOString());
        expect(v.kind).toBe('found');
        if (v.kind === 'found') expect(JSON.parse(v.version.raw ?? 'null')).toEqual(served);
      }
      // The updated user's current version starts at the publish of its last change, as the log says.
      const updatedFrom = up
        .prepare(`SELECT valid_from FROM user_versions WHERE client_user_id = ? AND valid_to IS NULL`)
        .pluck()
        .get(ids.updated);
      expect(updatedFrom).toBe(up.prepare(`SELECT published_at FROM sync_runs ORDER BY id LIMIT 1 OFFSET 2`).pluck().get());
      // Earlier versions come from the feed's events (run 1 was a baseline marker: from run 2 on).
      const earlier = up
        .prepare(`SELECT count(*) FROM user_versions WHERE backfilled = 1 AND valid_to IS NOT NULL`)
        .pluck()
        .get() as number;
      expect(earlier).toBeGreaterThan(0);
      expect(up.prepare(`SELECT count(*) FROM user_versions WHERE backfilled = 0`).pluck().get()).toBe(0);
    } finally {
      up.close();
    }
  });
});

describe('an online resolve', () => {
  it('writes history too: the version it replaces closes, the new one opens, at its own time (no run)', async () => {
    const d = rig.standIn.directory;
    const record = d.byClientUserId(ids.untouched);
    d.update(String(record?.user_id), 'fallback_time_zone');
    const start = new Date().toISOString();
    const online = await runCli(['resolve', ids.untouched, '--online'], rig.env());
    expect(online.code).toBe(0);
    const versions = db
      .prepare(`SELECT valid_from, valid_to, opened_run, closed_run, end_cause FROM user_versions WHERE client_user_id = ? ORDER BY id`)
      .all(ids.untouched) as Array<{ valid_from: string; valid_to: string | null; opened_run: number | null; closed_run: number | null }>;
    expect(versions).toHaveLength(2);
    expect(versions[0]).toMatchObject({ opened_run: 1, closed_run: null, end_cause: 'updated' });
    expect(versions[1]).toMatchObject({ opened_run: null, valid_to: null, valid_from: versions[0]?.valid_to });
    expect(String(versions[1]?.valid_from) >= start).toBe(true);
    const now = new HistoryReader(db).asOf(ids.untouched, new Date().toISOString());
    expect(now.kind === 'found' && JSON.parse(now.version.raw ?? 'null')).toEqual(d.byClientUserId(ids.untouched));
    const then = new HistoryReader(db).asOf(ids.untouched, moments.at(-1)?.at ?? '');
    expect(then.kind === 'found' && JSON.parse(then.version.raw ?? 'null')).toEqual(moments.at(-1)?.served.get(ids.untouched));
  });
});

/**
 * Shared by the mirror and resolve tests: wire-shaped user records, real
 * SQLite files in a fresh temp directory, and the compiled build that child
 * processes run.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach } from 'vitest';
import { parseUser } from '../../src/service/user-record.js';
import { openMirror, type Db } from '../../db/open.js';
import { RunWriter, sqliteRunWriter } from '../../src/sync/run-writer.js';
import type { StagedRecord } from '../../db/mirrored-user.js';
import { UserRefresh, type RefreshResult } from '../../db/user-refresh.js';
import { contentHash } from '../../db/user-row.js';
import { scanRecordSpans } from '../../src/service/page-spans.js';
import type { PageBytes } from '../../src/sync/page-decode.js';

const HERE = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The repository, from these sources or from their build under dist/ (a bench runs them built). */
export const ROOT = basename(HERE) === 'dist' ? dirname(HERE) : HERE;
export const TEAM = '6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b';
export const OTHER_TEAM = '7a2d3b9f-4c5e-4f60-9bac-1d2e3f4a5b6c';

export type WireRecord = Record<string, unknown>;

/** Deterministic UUID for user number `n`. */
export function userId(n: number): string {
  return `00000000-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
}

/** A record shaped like the live service's: provider and source, both date-time forms. */
export function wireUser(n: number, overrides: WireRecord = {}): WireRecord {
  const oura = { logo: 'https://cdn.example/logos/oura.png', name: 'Oura', slug: 'oura' };
  return {
    user_id: userId(n),
    team_id: TEAM,
    client_user_id: `client-${n}`,
    created_on: '2022-08-04T12:42:45.596792+00:00',
    connected_sources: [{ created_on: '2026-01-12T12:39:40Z', provider: oura, source: { ...oura, logo: 'https://old.example/oura.png' } }],
    fallback_time_zone: { id: 'Europe/London', source_slug: 'manual', updated_at: '2026-01-12T12:39:40Z' },
    fallback_birth_date: null,
    ingestion_start: '2022-01-01',
    ingestion_end: null,
    ...overrides,
  };
}

/** What the sync engine hands the writer: the parsed user, the record as received, and its field warnings. */
export function staged(record: WireRecord): StagedRecord {
  const parsed = parseUser(record);
  if (!parsed.ok) throw new Error(`fixture has no valid identity: ${parsed.issues}`);
  return { user: parsed.user, rawJson: JSON.stringify(record), warnings: parsed.warnings };
}

export function stagedUsers(ns: readonly number[], overrides: (n: number) => WireRecord = () => ({})): StagedRecord[] {
  return ns.map((n) => staged(wireUser(n, overrides(n))));
}

/**
 * A list page's bytes, as the client hands them to the run writer: staged
 * records as received (`rawJson`), anything else as JSON (a malformed record).
 */
export function pageOf(items: ReadonlyArray<StagedRecord | WireRecord | string>): PageBytes {
  const records = items.map((item) =>
    typeof item === 'object' && 'rawJson' in item ? (item as StagedRecord).rawJson : JSON.stringify(item),
  );
  const body = Buffer.from(`{"users":[${records.join(',')}],"total":${records.length},"offset":0,"limit":500}`);
  const scan = scanRecordSpans(body);
  if (!scan.ok) throw new Error(`pageOf: ${scan.reason}`);
  return { body, spans: scan.spans };
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

export interface TempDir {
  path: string;
  file: (name: string) => string;
  remove: () => void;
}

export function tempDir(prefix = 'mirror-'): TempDir {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, file: (name) => join(path, name), remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** A clock that moves one second per call, so every write gets a distinct time. */
export function steppingClock(start = Date.parse('2026-02-01T00:00:00.000Z')): () => Date {
  let t = start;
  return () => new Date((t += 1000));
}

/** Every source file the build compiles, without the extension. */
function builtSources(dir = ''): string[] {
  return readdirSync(join(ROOT, dir || '.'), { withFileTypes: true }).flatMap((e) => {
    const path = dir === '' ? e.name : `${dir}/${e.name}`;
    if (dir === '' && !['src', 'jobs', 'db'].includes(e.name)) return [];
    if (e.isDirectory()) return builtSources(path);
    return e.name.endsWith('.ts') ? [path.slice(0, -3)] : [];
  });
}

/**
 * Child processes run the compiled build. Rebuild when a source file is newer
 * than its output; the lock keeps parallel test files from building at once.
 */
export function ensureBuilt(): void {
  const stale = () =>
    builtSources().some((f) => {
      try {
        return statSync(join(ROOT, `${f}.ts`)).mtimeMs > statSync(join(ROOT, 'dist', `${f}.js`)).mtimeMs;
      } catch {
        return true;
      }
    });
  if (!stale()) return;
  const lock = join(tmpdir(), 'user-mirror-test-build.lock');
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`build lock ${lock} held for 2 minutes`);
      execFileSync('sleep', ['0.2']);
    }
  }
  try {
    if (!stale()) return;
    try {
      execFileSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'pipe' });
    } catch {
      // tsc exits non-zero over other in-progress files but still emits; the check below decides.
    }
    if (stale()) throw new Error('`npm run build` did not produce an up-to-date dist/');
  } finally {
    rmdirSync(lock);
  }
}

export interface TempMirror {
  dir: TempDir;
  db: Db;
  writer: RunWriter;
  /** The online resolve's write (db/user-writes.ts), on the same clock. */
  refresh: (record: StagedRecord) => RefreshResult;
}

/**
 * A fresh mirror file and a writer on a stepping clock for each test, closed
 * and removed after it: the set-up the mirror's own tests share. `onReady`
 * receives them before each test.
 */
export function useTempMirror(onReady: (m: TempMirror) => void): void {
  let m: TempMirror | undefined;
  beforeEach(() => {
    const dir = tempDir();
    const db = openMirror(dir.file('mirror.db'));
    const clock = steppingClock();
    const refresher = new UserRefresh(db, clock);
    const refresh = (record: StagedRecord) => refresher.refresh(record, contentHash(record.rawJson));
    m = { dir, db, writer: sqliteRunWriter(db, clock), refresh };
    onReady(m);
  });
  afterEach(() => {
    m?.db.close();
    m?.dir.remove();
  });
}

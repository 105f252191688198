/**
 * The dependency rule, by folder. Folders are ranked in layers, top to
 * bottom; a module may import from its own folder or from a folder on a
 * lower layer, never from one above and never from a peer on its own layer
 * (the sync core, the replica, the jobs and the stand-in know nothing of
 * each other: the daemon and the commands put them together). Every
 * source folder is ranked: a new one fails the test until it is placed.
 * Beside the ranking, the directions that must never hold are stated one by
 * one (FORBIDDEN), so that a re-ranking cannot quietly allow them.
 * `src/runtime/` and `src/service/` are the shared base: the one part of
 * `src/` that `jobs/` (a top-level folder by the project's layout, a peer of
 * the sync core by rank) may borrow. And no two files import each other.
 * A failing case names the import.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const LAYERS: readonly (readonly string[])[] = [
  ['src'], // the package's entry points: the CLI, the library, the producer
  ['src/commands'],
  ['src/daemon'], // the long-running process: wiring, schedules, watchdog, /readyz and /metrics, shutdown
  ['src/health'], // what status, /metrics and /readyz say: the verdicts, the status report and its text, the backup folder, schedule intervals
  ['src/export'], // the mirror as files for a lake: reads db/, applies the sinks' field policy
  ['src/sinks'], // the change feed delivered to Redis Streams, JetStream: reads the feed (db/), connects through jobs/
  ['src/sync', 'src/replica', 'jobs', 'src/stand-in'],
  ['src/service'],
  ['src/runtime'], // configuration, logging, deadlines, process lifecycle
  ['db'], // SQLite and nothing else: imports nothing from src/ or jobs/
];

const FOLDERS = LAYERS.flat();

/** Directions that never hold, whatever the ranking says: [from, to, why]. */
const FORBIDDEN: readonly (readonly [string, string, string])[] = [
  ['src/service', 'db', 'the wire never imports storage (storage maps to and from the wire records)'],
  ['db', 'src/service', 'storage never imports the wire'],
  ['db', 'src/sync', 'storage never imports the sync'],
  ['db', 'jobs', 'storage never imports the jobs'],
  ['src/sync', 'jobs', 'the sync never imports the jobs'],
  ['src/replica', 'jobs', 'the replica never imports the jobs'],
  ['src/stand-in', 'db', 'the stand-in never imports storage'],
  ['jobs', 'src/daemon', 'the jobs never import the daemon'],
  ['src/health', 'src/daemon', 'the health model never imports the daemon (status reads it without one)'],
  ['src/health', 'src/commands', 'the health model never imports the commands'],
];

/** What `jobs/` borrows from `src/`: the shared base below the sync core, the replica, the jobs and the stand-in. */
const SHARED_BASE: readonly string[] = ['src/service', 'src/runtime'];

/** The ranked folder a file belongs to: the nearest ranked ancestor (jobs/removals/x.ts is in jobs). */
function folderOf(path: string): string | undefined {
  let dir = dirname(path);
  for (;;) {
    if (FOLDERS.includes(dir)) return dir;
    if (dir === 'jobs' || dir === 'db' || dir === '.') return undefined;
    if (dirname(dir) === 'src' || dir === 'src') return FOLDERS.includes(dir) ? dir : undefined;
    dir = dirname(dir);
  }
}

function layerOf(folder: string): number {
  return LAYERS.findIndex((layer) => layer.includes(folder));
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

function imports(path: string): string[] {
  const text = readFileSync(path, 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) =>
    normalize(join(dirname(path), m[1] ?? '')).replace(/\.js$/, '.ts'),
  );
}

const ENTRY_POINTS = ['src/index.ts', 'src/producer.ts'];

/** Names a file exports that it did not define: `export … from`, or `export { x }` of an imported x. Entry points may. */
function reExports(path: string): string[] {
  if (ENTRY_POINTS.includes(path) || path.endsWith('/index.ts')) return [];
  const text = readFileSync(path, 'utf8');
  const imported = new Set(
    [...text.matchAll(/^import\s+(?:type\s+)?\{([^}]*)\}\s*from/gm)].flatMap((m) =>
      (m[1] ?? '').split(',').map(
        (part) =>
          part
            .replace(/^\s*type\s+/, '')
            .split(/\s+as\s+/)
            .pop()
            ?.trim() ?? '',
      ),
    ),
  );
  return [...text.matchAll(/^export\s+(?:type\s+)?(\*|\{[^}]*\})\s*(from\s*'[^']+')?/gm)].flatMap((m) => {
    if (m[2] !== undefined) return [`${path}: ${m[0]}`];
    const names = (m[1] ?? '')
      .replace(/[{}]/g, '')
      .split(',')
      .map(
        (part) =>
          part
            .replace(/^\s*type\s+/, '')
            .split(/\s+as\s+/)[0]
            ?.trim() ?? '',
      );
    return names.filter((name) => imported.has(name)).map((name) => `${path}: re-exports ${name}`);
  });
}

/** Why `from` may not import `to`, or undefined when it may. */
function violation(from: string, to: string): string | undefined {
  const a = folderOf(from);
  const b = folderOf(to);
  if (a === undefined || b === undefined) return `${from} imports ${to}: a file outside the ranked folders`;
  if (a === b) return undefined;
  const forbidden = FORBIDDEN.find(([x, y]) => x === a && y === b);
  if (forbidden !== undefined) return `${from} imports ${to}: ${forbidden[2]}`;
  const la = layerOf(a);
  const lb = layerOf(b);
  if (lb > la) return undefined;
  return `${from} imports ${to}: ${lb === la ? `${b} is a peer of ${a}` : `${b} is above ${a}`}`;
}

describe('architecture', () => {
  const files = ['src', 'jobs', 'db'].flatMap(sources);

  it('ranks every source folder', () => {
    const unranked = files.filter((f) => folderOf(f) === undefined);
    expect(unranked).toEqual([]);
    for (const folder of FOLDERS)
      expect(
        files.some((f) => folderOf(f) === folder),
        folder,
      ).toBe(true);
  });

  it('has no import pointing up a layer or across to a peer', () => {
    const bad = files.flatMap((file) => imports(file).flatMap((target) => violation(file, target) ?? []));
    expect(bad).toEqual([]);
  });

  it('has jobs/ borrow from src/ only the shared base', () => {
    const borrowed = files
      .filter((f) => folderOf(f) === 'jobs')
      .flatMap((file) => imports(file).map((target) => folderOf(target) ?? target))
      .filter((folder) => folder.startsWith('src'));
    expect(borrowed.length).toBeGreaterThan(0);
    expect([...new Set(borrowed)].filter((folder) => !SHARED_BASE.includes(folder))).toEqual([]);
  });

  it('has one import path per name: no pass-through re-export outside the entry points', () => {
    expect(files.flatMap(reExports)).toEqual([]);
  });

  it('has no two files that import each other', () => {
    const of = new Map(files.map((f) => [f, new Set(imports(f))]));
    const mutual = files.flatMap((a) =>
      [...(of.get(a) ?? [])].filter((b) => a < b && of.get(b)?.has(a) === true).map((b) => `${a} <-> ${b}`),
    );
    expect(mutual).toEqual([]);
  });

  it('would catch one', () => {
    expect(violation('db/open.ts', 'src/runtime/config.ts')).toMatch(/is above db/);
    expect(violation('jobs/sync/worker.ts', 'src/sync/engine.ts')).toMatch(/peer/);
    expect(violation('src/service/client.ts', 'src/sync/engine.ts')).toMatch(/is above/);
    expect(violation('src/daemon/daemon.ts', 'jobs/sync/worker.ts')).toBeUndefined();
    expect(violation('src/commands/status.ts', 'src/health/status-report.ts')).toBeUndefined();
    expect(violation('src/daemon/scrape-gauges.ts', 'src/health/staleness.ts')).toBeUndefined();
    expect(violation('src/health/staleness.ts', 'src/daemon/daemon.ts')).toMatch(/never imports the daemon/);
    expect(violation('jobs/removals/worker.ts', 'jobs/tolerant-bullmq.ts')).toBeUndefined();
    expect(violation('src/service/client.ts', 'db/mirrored-user.ts')).toMatch(/wire never imports storage/);
    expect(violation('src/stand-in/server.ts', 'db/open.ts')).toMatch(/stand-in never imports storage/);
    expect(violation('src/sync/page-decode.ts', 'db/mirrored-user.ts')).toBeUndefined();
    for (const [from, to] of FORBIDDEN) expect(violation(`${from}/x.ts`, `${to}/y.ts`), `${from} -> ${to}`).toBeDefined();
  });
});

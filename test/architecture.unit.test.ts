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
 * the sync core by rank) may borrow. No import cycle of any length: the
 * graph of src/, jobs/ and db/ counts every import (`import type`,
 * `export … from` and `import()` too), and a cycle is named file by file.
 * SQLite is spoken only in db/: no file outside it imports better-sqlite3
 * or calls `.prepare(`/`.pragma(` (the PostgreSQL destination's schema
 * step is `ensureSchema()` for that reason). A failing case names the
 * import, the cycle or the line.
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

/** At most this many cycles are named per tangle: enough to see its shape, bounded however tangled. */
const CYCLES_NAMED = 20;

/**
 * The import cycles of `graph`, each written as a path that returns to its
 * start (`a -> b -> a`). Tarjan's algorithm finds the strongly connected
 * components (a tangle of files that reach each other, or a file importing
 * itself); within each, every elementary cycle is named, from its
 * alphabetically first file, up to CYCLES_NAMED.
 */
function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const components: string[][] = [];
  const edges = (v: string) => [...new Set(graph.get(v) ?? [])].filter((w) => graph.has(w)).sort();
  const connect = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v) ?? 0);
    stack.push(v);
    onStack.add(v);
    for (const w of edges(v)) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (;;) {
      const w = stack.pop() ?? v;
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1 || edges(v).includes(v)) components.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) connect(v);
  return components.flatMap((component) => {
    const cycles: string[] = [];
    // Each elementary cycle once: from its first file, through later files of the component only.
    component.forEach((start, i) => {
      const later = new Set(component.slice(i));
      const walk = (path: string[]): void => {
        for (const w of edges(path[path.length - 1] ?? start)) {
          if (cycles.length > CYCLES_NAMED) return;
          if (w === start) cycles.push([...path, start].join(' -> '));
          else if (later.has(w) && !path.includes(w)) walk([...path, w]);
        }
      };
      walk([start]);
    });
    if (cycles.length > CYCLES_NAMED) cycles.splice(CYCLES_NAMED, Infinity, `… and more among ${component.join(', ')}`);
    return cycles;
  });
}

/** Where a file outside db/ speaks SQLite: a better-sqlite3 import, or a `.prepare(`/`.pragma(` call; comments aside. */
function sqliteOutsideDb(path: string, text = readFileSync(path, 'utf8')): string[] {
  if (path.startsWith('db/')) return [];
  const code = text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  return code.split('\n').flatMap((line, i) => {
    const found = [
      /(?:from|import|require)\s*\(?\s*['"]better-sqlite3['"]/.test(line) ? 'imports better-sqlite3' : undefined,
      /\.\s*prepare\s*[<(]/.test(line) ? 'calls .prepare(' : undefined,
      /\.\s*pragma\s*[<(]/.test(line) ? 'calls .pragma(' : undefined,
    ].filter((x) => x !== undefined);
    return found.map((what) => `${path}:${i + 1} ${what}: SQLite is spoken only in db/ (add a reader or a writer there)`);
  });
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

  it('has no import cycle of any length, type-only imports included', () => {
    expect(importCycles(new Map(files.map((f) => [f, imports(f)])))).toEqual([]);
  });

  it('speaks SQLite only in db/', () => {
    expect(files.flatMap((file) => sqliteOutsideDb(file))).toEqual([]);
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

  it('would catch a cycle of any length, and none where there is none', () => {
    const graph = (edges: string): Map<string, string[]> => {
      const g = new Map<string, string[]>();
      for (const edge of edges.split(' ')) {
        const [a = '', b = ''] = edge.split('>');
        g.set(a, [...(g.get(a) ?? []), b]);
        if (!g.has(b)) g.set(b, []);
      }
      return g;
    };
    // a -> b -> c -> d -> a, with a side branch and a file outside the cycle importing into it.
    expect(importCycles(graph('a>b b>c c>d d>a b>e e>f x>a'))).toEqual(['a -> b -> c -> d -> a']);
    expect(importCycles(graph('d>a a>b c>d b>c'))).toEqual(['a -> b -> c -> d -> a']);
    expect(importCycles(graph('a>b b>a'))).toEqual(['a -> b -> a']);
    expect(importCycles(graph('a>a'))).toEqual(['a -> a']);
    // Two cycles sharing a file: one tangle, each cycle named.
    expect(importCycles(graph('a>b b>a b>c c>d d>b'))).toEqual(['a -> b -> a', 'b -> c -> d -> b']);
    // Two apart.
    expect(importCycles(graph('a>b b>a x>y y>z z>x'))).toEqual(['a -> b -> a', 'x -> y -> z -> x']);
    // A diamond is not a cycle.
    expect(importCycles(graph('a>b a>c b>d c>d d>e'))).toEqual([]);
  });

  it('would catch SQLite outside db/', () => {
    expect(sqliteOutsideDb('src/x.ts', "import Database from 'better-sqlite3';")).toHaveLength(1);
    expect(sqliteOutsideDb('src/x.ts', "import type { Database } from 'better-sqlite3';")).toHaveLength(1);
    expect(sqliteOutsideDb('src/x.ts', "db.prepare('SELECT 1').get();")).toHaveLength(1);
    expect(sqliteOutsideDb('src/x.ts', 'db\n  .prepare<[], { n: number }>(sql)')).toEqual([
      'src/x.ts:2 calls .prepare(: SQLite is spoken only in db/ (add a reader or a writer there)',
    ]);
    expect(sqliteOutsideDb('src/x.ts', "db.pragma('page_size', { simple: true });")).toHaveLength(1);
    expect(sqliteOutsideDb('db/x.ts', "db.prepare('SELECT 1').get();")).toEqual([]);
    expect(sqliteOutsideDb('src/x.ts', '/** db.prepare(sql) */ // db.pragma(x)\nconst prepared = prepareSchema(c);')).toEqual([]);
  });
});

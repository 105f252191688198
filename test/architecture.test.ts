/**
 * The dependency rule, one way down: commands → daemon → jobs → sync → db →
 * service. A module may import from its own layer or any layer below, never
 * from one above. Shared leaves (config, log, deadline, the wire helpers, …)
 * sit below them all: any layer may use them, and they import only each
 * other. A failing case names the import.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const LAYERS: Array<[name: string, test: (path: string) => boolean]> = [
  ['commands', (p) => p.startsWith('src/commands/') || p === 'src/cli.ts' || p === 'src/index.ts' || p === 'src/producer.ts' || p.startsWith('src/stand-in/')],
  ['daemon', (p) => p.startsWith('src/daemon/') || p.startsWith('src/replica/')],
  ['jobs', (p) => p.startsWith('jobs/')],
  ['sync', (p) => p.startsWith('src/sync/')],
  ['db', (p) => p.startsWith('db/') || p === 'src/resolve.ts' || p === 'src/audit-location.ts'],
  ['service', (p) => p.startsWith('src/service/')],
];

/** Index in LAYERS; a shared leaf (the other src/*.ts, src/wire/) ranks below every layer. */
function rank(path: string): number {
  const i = LAYERS.findIndex(([, test]) => test(path));
  return i >= 0 ? i : LAYERS.length;
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

describe('architecture', () => {
  const files = ['src', 'jobs', 'db'].flatMap(sources);

  it('finds the modules it rules over', () => {
    for (const [name, test] of LAYERS) expect(files.some(test), name).toBe(true);
  });

  it('has no import pointing up a layer', () => {
    const upward: string[] = [];
    for (const file of files) {
      for (const target of imports(file)) {
        if (rank(target) < rank(file)) upward.push(`${file} imports ${target}`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('would catch one: the rule ranks the sync above db', () => {
    expect(rank('src/sync/engine.ts')).toBeLessThan(rank('db/mirror-store.ts'));
    expect(rank('jobs/sync-worker.ts')).toBeLessThan(rank('src/sync/engine.ts'));
    expect(rank('src/daemon/daemon.ts')).toBeLessThan(rank('jobs/sync-worker.ts'));
    expect(rank('src/log.ts')).toBeGreaterThan(rank('src/service/client.ts'));
  });
});

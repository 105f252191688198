/**
 * Every relative link in the docs reaches a file (docs/sql.md once pointed
 * at `db/SCHEMA.md` from inside docs/). Anchors and web addresses are not
 * followed: only that the file a reader would open is there.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/mirror-fixtures.js';

const DOCS = [
  'README.md',
  'db/SCHEMA.md',
  'bench/README.md',
  '.ci/README.md',
  ...['docs', 'jobs'].flatMap((d) =>
    readdirSync(join(ROOT, d))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `${d}/${f}`),
  ),
];

describe('links in the docs', () => {
  it.each(DOCS)('%s: every relative link names a file that exists', (doc) => {
    const text = readFileSync(join(ROOT, doc), 'utf8').replace(/```[\s\S]*?```/g, '');
    const broken = [...text.matchAll(/\]\(([^)\s]+)\)/g)]
      .map((m) => m[1] ?? '')
      .filter((target) => !/^[a-z]+:/i.test(target) && !target.startsWith('#'))
      .map((target) => join(dirname(join(ROOT, doc)), decodeURIComponent(target.split('#')[0] ?? '')))
      .filter((path) => !existsSync(path))
      .map((path) => relative(ROOT, path));
    expect(broken).toEqual([]);
  });
});

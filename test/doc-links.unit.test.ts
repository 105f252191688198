/**
 * Every relative link in the docs reaches a file (docs/sql.md once pointed
 * at `db/SCHEMA.md` from inside docs/), and a page the release artefact
 * ships (package.json `files`) links only to files it ships too (the README
 * once linked .ci/README.md, which a host never has). Anchors and web
 * addresses are not followed: only that the file a reader would open is there.
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

/** The files of a page's relative links, as absolute paths. */
function linkedFiles(doc: string): string[] {
  const text = readFileSync(join(ROOT, doc), 'utf8').replace(/```[\s\S]*?```/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1] ?? '')
    .filter((target) => !/^[a-z]+:/i.test(target) && !target.startsWith('#'))
    .map((target) => join(dirname(join(ROOT, doc)), decodeURIComponent(target.split('#')[0] ?? '')));
}

/** package.json `files`: folders end in '/', the rest are files; negations only drop build output here. */
const SHIPPED = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { files: string[] }).files.filter(
  (f) => !f.startsWith('!'),
);
const shipped = (path: string): boolean => SHIPPED.some((f) => (f.endsWith('/') ? path.startsWith(f) : path === f));

describe('links in the docs', () => {
  it.each(DOCS)('%s: every relative link names a file that exists', (doc) => {
    const broken = linkedFiles(doc)
      .filter((path) => !existsSync(path))
      .map((path) => relative(ROOT, path));
    expect(broken).toEqual([]);
  });

  it.each(DOCS.filter(shipped))('%s (in the release artefact): every relative link names a file the artefact holds', (doc) => {
    const outside = linkedFiles(doc)
      .map((path) => relative(ROOT, path))
      .filter((path) => !shipped(path) && !shipped(`${path}/`));
    expect(outside).toEqual([]);
  });
});

/**
 * Every relative link in the docs reaches a file (docs/sql.md once pointed
 * at `db/SCHEMA.md` from inside docs/), and a page the release artefact
 * ships (package.json `files`) links only to files it ships too (the README
 * once linked .ci/README.md, which a host never has). Anchors and web
 * addresses are not followed: only that the file a reader would open is there.
 *
 * The same for the repository paths the code's comments name (db/open-audit.ts
 * once sent its reader to a jobs/removals file that had been renamed): every
 * `src/…`, `db/…`, `jobs/…`, `test/…`, `docs/…`, `bench/…` or `contrib/…` file
 * named in a comment under src/, db/, jobs/ or test/ exists (a `.js` name may
 * be its `.ts` source). Only comments: TypeScript's parser tells them from
 * strings and regular expressions.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/mirror-fixtures.js';

const DOCS = [
  'README.md',
  'db/SCHEMA.md',
  'bench/README.md',
  '.ci/README.md',
  ...['docs', 'jobs', 'bench/history'].flatMap((d) =>
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

/** Paths a comment names as a pattern, not as a file: the examples a rule is stated with. */
const EXAMPLE_PATHS = new Set([
  // test/architecture.unit.test.ts: "jobs/removals/x.ts is in jobs", any file of that folder.
  'jobs/removals/x.ts',
  // test/migration-files.unit.test.ts: the shape of a migration's file name.
  'db/migrations/NNN-name.ts',
]);

/** A repository path with a file's extension, not inside a longer path (dist/src/…, node_modules/…). */
const REPO_PATH = /(?<![\w./*@-])((?:src|db|jobs|test|docs|bench|contrib)\/[\w./-]*?\.(?:ts|js|cjs|mjs|md|json|ya?ml|sql))(?![\w/-])/g;

function typeScriptFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? typeScriptFiles(`${dir}/${e.name}`) : e.name.endsWith('.ts') ? [`${dir}/${e.name}`] : [],
  );
}

/** Every comment of a source text with the line it starts on: the trivia before and after each node the parser finds. */
function commentsIn(file: string, text: string): { line: number; text: string }[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const found = new Map<number, string>();
  const collect = (pos: number): void => {
    // Trailing: those on the rest of pos's line; leading: those on the lines after it.
    for (const r of [...(ts.getTrailingCommentRanges(text, pos) ?? []), ...(ts.getLeadingCommentRanges(text, pos) ?? [])]) {
      found.set(r.pos, text.slice(r.pos, r.end));
    }
  };
  const visit = (node: ts.Node): void => {
    collect(node.pos);
    // A comment after a block's last statement is in no node's leading trivia: it follows a node's end.
    collect(node.end);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return [...found].map(([pos, comment]) => ({ line: source.getLineAndCharacterOfPosition(pos).line + 1, text: comment }));
}

/** The repository paths a comment names, each with the line it stands on. */
const pathsIn = (comment: { line: number; text: string }): { line: number; path: string }[] =>
  [...comment.text.matchAll(REPO_PATH)].map((m) => ({
    line: comment.line + comment.text.slice(0, m.index).split('\n').length - 1,
    path: m[1] ?? '',
  }));

const exists = (path: string): boolean =>
  existsSync(join(ROOT, path)) || (path.endsWith('.js') && existsSync(join(ROOT, path.replace(/\.js$/, '.ts'))));

describe('repository paths in comments', () => {
  const SOURCES = ['src', 'db', 'jobs', 'test'].flatMap((dir) => typeScriptFiles(dir));

  it('reads the paths of comments, not of strings or regular expressions, wherever the comment stands', () => {
    const text = [
      "const page = 'docs/in-a-string.md'; // after code: docs/trailing.md",
      'const quote = /[`\'"]/; // after a regex that holds quotes: src/after-regex.ts',
      'const t = `${page}: ${(() => 1)()}`; /* after a template: db/after-template.ts */',
      'function f(): void {',
      '  g();',
      '  // the last thing in a block: jobs/last-in-block.ts, and not dist/src/built.js',
      '}',
      '/**',
      ' * before a declaration, on its second line: test/support/jsdoc.ts.',
      ' */',
      'export const x = 1;',
      '// at the end of the file: contrib/end.yml',
    ].join('\n');
    const found = commentsIn('probe.ts', text).flatMap((c) => pathsIn(c).map((p) => `${p.line}: ${p.path}`));
    expect(found.sort()).toEqual(
      [
        '1: docs/trailing.md',
        '2: src/after-regex.ts',
        '3: db/after-template.ts',
        '6: jobs/last-in-block.ts',
        '9: test/support/jsdoc.ts',
        '12: contrib/end.yml',
      ].sort(),
    );
  });

  it('every src/, db/, jobs/, test/, docs/, bench/ or contrib/ file a comment names exists', () => {
    const stale = SOURCES.flatMap((file) =>
      commentsIn(file, readFileSync(join(ROOT, file), 'utf8')).flatMap((c) =>
        pathsIn(c)
          .filter(({ path }) => !EXAMPLE_PATHS.has(path) && !exists(path))
          .map(({ line, path }) => `${file}:${line}: ${path}`),
      ),
    );
    expect(stale).toEqual([]);
  }, 120_000);
});

/**
 * docs/postgres.md's recipes against docs/sql.md's: each PostgreSQL recipe
 * paired with the sql.md recipe under the same comment line, run as the
 * docs say (psql with the block's SET and \set lines, sqlite3 with the
 * `.parameter set` line), rows compared as sets with times in one notation.
 * For test/postgres-recipes.test.ts and the soak (./postgres-soak.ts).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './mirror-fixtures.js';

/** Recipes of a doc's ```sql blocks by their comment line(s), with the setting lines (SET, \set, .parameter) of their block. */
export function recipes(file: string): { byComment: Map<string, string>; settings: string[]; blocks: string[] } {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const blocks = [...text.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  const byComment = new Map<string, string>();
  const settings: string[] = [];
  for (const block of blocks) {
    let comment = '';
    let statement = '';
    for (const line of block.split('\n')) {
      if (statement === '' && line.startsWith('-- ')) comment += (comment === '' ? '' : ' ') + line.slice(3);
      else if (statement === '' && /^(SET |\\set |\.parameter )/.test(line)) settings.push(line);
      else if (line.trim() !== '') {
        statement += `${line}\n`;
        if (line.trimEnd().endsWith(';')) {
          if (comment !== '') byComment.set(comment, statement);
          comment = '';
          statement = '';
        }
      }
    }
  }
  return { byComment, settings, blocks };
}

export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted && ch === '"' && text[i + 1] === '"') {
      cell += '"';
      i++;
    } else if (ch === '"') {
      quoted = !quoted;
    } else if (!quoted && ch === ',') {
      row.push(cell);
      cell = '';
    } else if (!quoted && ch === '\n') {
      rows.push([...row, cell]);
      row = [];
      cell = '';
    } else if (quoted || ch !== '\r') {
      cell += ch;
    }
  }
  if (cell !== '' || row.length > 0) rows.push([...row, cell]);
  return rows;
}

/** PostgreSQL's `2026-11-29 03:07:14.12+00` and SQLite's `2026-11-29T03:07:14.120Z` alike. */
export function normal(cell: string): string {
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?(?:Z|\+00(?::00)?)$/.exec(cell);
  return m === null ? cell : `${m[1]}T${m[2]}.${(m[3] ?? '').padEnd(3, '0').slice(0, 3)}Z`;
}

export function answer(rows: string[][]): string[] {
  return rows.map((r) => r.map(normal).join(',')).sort();
}

export function psql(url: string, input: string): string {
  const r = spawnSync('psql', [url, '-X', '-q', '-t', '--csv', '-v', 'ON_ERROR_STOP=1'], { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

export function sqlite(dbPath: string, input: string): string {
  const r = spawnSync('sqlite3', ['-readonly', '-csv', dbPath], { input, encoding: 'utf8' });
  if (r.status !== 0 || r.stderr !== '') throw new Error(`sqlite3 exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

/** Every recipe both docs hold, run on both sides for `clientUserId`: the comments whose rows differ (or that answered nothing on the mirror). */
export function compareRecipes(url: string, dbPath: string, clientUserId: string): { compared: number; differing: string[] } {
  const pg = recipes('docs/postgres.md');
  const lite = recipes('docs/sql.md');
  const shared = [...pg.byComment.keys()].filter((k) => lite.byComment.has(k));
  const pgSettings = [
    ...new Set(
      pg.settings
        .filter((s) => !s.startsWith('\\set') || s.includes('client_user_id'))
        .map((s) => (s.startsWith('\\set client_user_id') ? `\\set client_user_id '${clientUserId}'` : s)),
    ),
  ];
  const differing: string[] = [];
  for (const comment of shared) {
    const onPg = answer(parseCsv(psql(url, `${pgSettings.join('\n')}\n${pg.byComment.get(comment)}`)));
    const onMirror = answer(parseCsv(sqlite(dbPath, `.parameter set :client_user_id '${clientUserId}'\n${lite.byComment.get(comment)}`)));
    if (onMirror.length === 0) differing.push(`${comment}: nothing on the mirror`);
    else if (JSON.stringify(onPg) !== JSON.stringify(onMirror)) {
      // The rows one side has and the other lacks (a few): what a failing run needs to be understood.
      const only = (a: string[], b: string[]) => a.filter((r) => !b.includes(r)).slice(0, 3);
      differing.push(
        `${comment}: ${onPg.length} rows on PostgreSQL, ${onMirror.length} on the mirror; only on PostgreSQL ${JSON.stringify(only(onPg, onMirror))}, only on the mirror ${JSON.stringify(only(onMirror, onPg))}`,
      );
    }
  }
  return { compared: shared.length, differing };
}

/**
 * `npm run soak:export -- --users 100000`: issue 53's done-when at its size.
 * test/support/export-scenario.ts builds a mirror with history by real syncs
 * from the stand-in (creations, updates, sources connected and disconnected,
 * deletions and restores over three runs), exports it, and asks DuckDB the
 * docs/export.md recipes beside the docs/sql.md recipes asked of the mirror;
 * then one more sync and an incremental export beside exactly that sync's
 * changes. Prints a markdown table of the comparisons; exits 1 when an answer
 * differs (or is empty). test/export.test.ts asserts the same at 3,000 users.
 */
import { parseArgs } from 'node:util';
import {
  buildExportScenario,
  incrementalComparisons,
  recipeComparisons,
  sameAnswer,
  type Comparison,
} from '../test/support/export-scenario.js';

const { values } = parseArgs({ options: { users: { type: 'string', default: '100000' } } });
const users = Number(values.users);
if (!Number.isSafeInteger(users) || users < 100) throw new Error(`--users: a whole number of at least 100, not ${String(values.users)}`);

const scenario = await buildExportScenario(users);
let failed = false;
try {
  const recipes = await recipeComparisons(scenario);
  const started = performance.now();
  const { result, comparisons } = await incrementalComparisons(scenario);
  const incrementalS = (performance.now() - started) / 1000;
  const rows = (m: { files: Array<{ table: string; rows: number }> }) =>
    m.files.map((f) => `${f.table} ${f.rows.toLocaleString('en')}`).join(', ');
  console.log(
    `\nsoak:export, ${users.toLocaleString('en')} users: three syncs ${scenario.timings.syncs.toFixed(1)} s, full export ` +
      `${scenario.timings.export.toFixed(1)} s (${rows(scenario.full.manifest)}); one more sync and the incremental export ` +
      `${incrementalS.toFixed(1)} s (${rows(result.manifest)})\n`,
  );
  console.log('| question | mirror rows | export rows (DuckDB) | same answer |');
  console.log('|---|---:|---:|---|');
  const print = (c: Comparison) => {
    const ok = sameAnswer(c) && c.mirror.length > 0;
    failed ||= !ok;
    console.log(`| ${c.name} | ${c.mirror.length.toLocaleString('en')} | ${c.lake.length.toLocaleString('en')} | ${ok ? 'yes' : 'NO'} |`);
  };
  recipes.forEach(print);
  comparisons.forEach((c) => print({ ...c, name: `incremental: ${c.name}` }));
  console.log(failed ? '\nNot met: an answer differs or is empty.' : '\nMet: every answer is the same.');
} finally {
  await scenario.close();
}
process.exitCode = failed ? 1 : 0;

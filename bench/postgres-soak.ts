/**
 * Issue 52's done-when at scale: `npm run soak:postgres -- --users 100000
 * [--kills 12] [--baseline-kills 4]`. The scenario of
 * test/support/postgres-soak.ts (the suite runs it at 3,000 users): a
 * daemon with a postgres sink killed -9 during the baseline and during
 * applies through churn, then tables, position, recipes and as-of answers
 * compared with the mirror. Prints a Markdown table; exits 1 when anything
 * differs.
 */
import { parseArgs } from 'node:util';
import { runPostgresSoak } from '../test/support/postgres-soak.js';

const { values } = parseArgs({
  options: {
    users: { type: 'string', default: '100000' },
    kills: { type: 'string', default: '12' },
    'baseline-kills': { type: 'string', default: '4' },
    'batch-events': { type: 'string', default: '200' },
  },
});
const users = Number(values.users);
const kills = Number(values.kills);
const baselineKills = Number(values['baseline-kills']);
if (!Number.isInteger(users) || users < 100 || !Number.isInteger(kills) || kills < 1 || !(baselineKills >= 0 && baselineKills < kills)) {
  process.stderr.write('usage: soak:postgres -- --users N (≥ 100) [--kills K] [--baseline-kills B < K] [--batch-events E]\n');
  process.exit(2);
}
const r = await runPostgresSoak({
  users,
  kills,
  baselineKills,
  batchEvents: Number(values['batch-events']),
  asOfSamples: 30,
  stepTimeoutMs: 1_800_000,
  log: (line) => process.stderr.write(`${line}\n`),
});
const equal = (t: keyof typeof r.mirror) => (JSON.stringify(r.mirror[t]) === JSON.stringify(r.destination[t]) ? 'equal' : 'DIFFERENT');
const rows: Array<[string, string]> = [
  ['users (directory)', users.toLocaleString('en')],
  ['kills -9 (baseline / applies)', `${r.kills.baseline} / ${r.kills.apply}`],
  ['baseline kills leaving the previous position', `${r.baselineKillsConfirmed} of ${r.kills.baseline}`],
  ['positions after the apply kills', r.applyPositions.join(', ')],
  ['feed events', r.events.toLocaleString('en')],
  ...(['users', 'sources', 'versions', 'connections'] as const).map((t): [string, string] => [
    `${t} rows (mirror = destination)`,
    `${r.mirror[t].rows.toLocaleString('en')} = ${r.destination[t].rows.toLocaleString('en')}: ${equal(t)}`,
  ]),
  [
    'position (mirror = destination)',
    `${r.position.mirror.cursor} = ${r.position.destination.cursor}, epoch ${r.position.mirror.epoch === r.position.destination.epoch ? 'equal' : 'DIFFERENT'}`,
  ],
  [
    'recipes compared / differing',
    `${r.recipes.compared} / ${r.recipes.differing.length}${r.recipes.differing.length === 0 ? '' : `: ${r.recipes.differing.join('; ')}`}`,
  ],
  ['as-of samples (found) / differing', `${r.asOf.compared} (${r.asOf.found}) / ${r.asOf.differing.length}`],
  ['first sync and baseline kills', `${(r.ms.firstSync / 1000).toFixed(0)} s`],
  ['catch-up after the last kill', `${(r.ms.catchUp / 1000).toFixed(0)} s`],
  ['total', `${(r.ms.total / 1000).toFixed(0)} s`],
];
process.stdout.write(`| soak:postgres | |\n|---|---|\n${rows.map(([k, v]) => `| ${k} | ${v} |`).join('\n')}\n`);
for (const d of r.asOf.differing) process.stderr.write(`as-of: ${d}\n`);
const ok =
  (['users', 'sources', 'versions', 'connections'] as const).every((t) => equal(t) === 'equal') &&
  r.position.mirror.cursor === r.position.destination.cursor &&
  r.position.mirror.epoch === r.position.destination.epoch &&
  r.recipes.differing.length === 0 &&
  r.asOf.differing.length === 0;
process.exitCode = ok ? 0 : 1;

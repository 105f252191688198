/**
 * `npm run bench:export`: what `user-mirror export` costs against what a
 * data engineer does by hand, `sqlite3 -csv` of the same tables, in the same
 * run on the same mirror: wall time, peak RSS (each a whole process, measured
 * by /usr/bin/time), and bytes per user. The mirror has BENCH_USERS users
 * (default 1,000,000) and history: a first `sync --once` from the stand-in,
 * then a day of churn (1% updated, 0.5% deleted, 0.5% added, a tenth of the
 * deleted restored) and a second sync. BENCH_ROUNDS rounds (default 3),
 * medians printed; peak RSS is the highest of the rounds.
 *
 * Goals (issue 53): the export no slower than 2× `sqlite3 -csv` of the same
 * tables, while typed and compressed; peak RSS ≤ 200 MB at 3,000,000 users
 * (BENCH_USERS=3000000).
 *
 * BENCH_MIRROR=<path>: the mirror is kept there and, when the file exists,
 * reused without the syncs (a second run measures the export alone).
 *
 * Prints a markdown table.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStandIn } from '../src/stand-in/index.js';

const USERS = Number(process.env.BENCH_USERS ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const KEPT_MIRROR = process.env.BENCH_MIRROR;
const CLI = fileURLToPath(new URL('../cli.js', import.meta.url));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

/**
 * One whole process under /usr/bin/time: wall seconds, CPU seconds (user + system) and peak RSS (MB); throws
 * unless it exits 0. On a shared machine the CPU seconds compare two contestants whose minutes were not
 * equally loaded; the goal is the wall time's.
 */
async function measured(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  dir: string,
): Promise<{ s: number; cpuS: number; rssMb: number }> {
  const out = join(dir, 'time.txt');
  const started = performance.now();
  // Not spawnSync: it would block this process's event loop, where the stand-in answers the sync.
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn('/usr/bin/time', ['-f', '%M %U %S', '-o', out, command, ...args], { env, stdio: ['ignore', 'ignore', 'inherit'] });
    child.on('exit', resolve);
  });
  const s = (performance.now() - started) / 1000;
  if (code !== 0) throw new Error(`${command} ${args.join(' ')}: exit ${String(code)}`);
  const [kb, user, system] = (readFileSync(out, 'utf8').trim().split('\n').at(-1) ?? '').split(' ').map(Number);
  return { s, cpuS: (user ?? NaN) + (system ?? NaN), rssMb: (kb ?? NaN) / 1024 };
}

function folderBytes(dir: string, suffix: string): number {
  return readdirSync(dir)
    .filter((n) => n.endsWith(suffix))
    .reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-export-'));
  const reuse = KEPT_MIRROR !== undefined && existsSync(KEPT_MIRROR);
  const standIn = reuse ? undefined : await startStandIn({ users: USERS, seed: 5, orgs: 0, membersPerOrg: 0 });
  const env = {
    ...process.env,
    ENV_FILE: '/dev/null',
    SERVICE_BASE_URL: standIn?.baseUrl ?? 'http://127.0.0.1:9',
    SERVICE_API_KEY: standIn?.apiKey ?? 'unused',
    SERVICE_API_KEY_HEADER: standIn?.apiKeyHeader ?? 'x-vital-api-key',
    MIRROR_DB: KEPT_MIRROR ?? join(dir, 'mirror.db'),
    LOG_LEVEL: 'warn',
  };
  try {
    let first: { s: number } = { s: NaN };
    let second: { s: number } = { s: NaN };
    if (standIn !== undefined) {
      first = await measured(process.execPath, [CLI, 'sync', '--once'], env, dir);
      const d = standIn.directory;
      const listed = d.page(0, Math.ceil(USERS * 0.02)).map((u) => String(u.user_id));
      const updated = Math.floor(USERS * 0.01);
      for (const id of listed.slice(0, updated)) d.update(id, 'fallback_time_zone');
      const deleted = listed.slice(updated, updated + Math.floor(USERS * 0.005));
      d.delete(deleted);
      d.add(Math.floor(USERS * 0.005));
      second = await measured(process.execPath, [CLI, 'sync', '--once'], env, dir);
      d.restore(deleted.slice(0, Math.floor(deleted.length / 10)));
      await measured(process.execPath, [CLI, 'sync', '--once'], env, dir);
    }
    const mirrorBytes = statSync(env.MIRROR_DB).size;

    const exports: Array<{ s: number; cpuS: number; rssMb: number }> = [];
    const csvs: Array<{ s: number; cpuS: number; rssMb: number }> = [];
    let parquetBytes = 0;
    let csvBytes = 0;
    let rows: Record<string, number> = {};
    for (let round = 0; round < ROUNDS; round++) {
      const out = join(dir, `lake-${round}`);
      exports.push(await measured(process.execPath, [CLI, 'export', '--out', out], env, dir));
      const folder = join(out, readdirSync(out).find((n) => n.startsWith('export-')) ?? '');
      parquetBytes = folderBytes(folder, '.parquet');
      const manifest = JSON.parse(readFileSync(join(folder, 'manifest.json'), 'utf8')) as { files: Array<{ table: string; rows: number }> };
      rows = Object.fromEntries(manifest.files.map((f) => [f.table, f.rows]));
      rmSync(out, { recursive: true, force: true });

      const csv = join(dir, `csv-${round}`);
      mkdirSync(csv);
      const q = (name: string, sql: string) => [`.once ${join(csv, `${name}.csv`)}`, sql];
      csvs.push(
        await measured(
          'sqlite3',
          [
            '-readonly',
            '-csv',
            '-header',
            env.MIRROR_DB,
            ...q('users', 'SELECT * FROM users'),
            ...q('versions', 'SELECT * FROM user_history'),
            ...q('sources', 'SELECT * FROM source_history'),
            ...q('changes', 'SELECT * FROM change_events'),
          ],
          env,
          dir,
        ),
      );
      csvBytes = folderBytes(csv, '.csv');
      rmSync(csv, { recursive: true, force: true });
    }
    const s = (x: number) => x.toFixed(2);
    const mb = (x: number) => x.toFixed(0);
    const users = USERS.toLocaleString('en');
    const ratio = median(exports.map((e) => e.s)) / median(csvs.map((c) => c.s));
    console.log(
      `\nbench:export, ${users} users (mirror ${(mirrorBytes / 1_048_576).toFixed(0)} MB; first sync ${s(first.s)} s, churn sync ${s(second.s)} s), ` +
        `${ROUNDS} rounds (medians; RSS the highest)\n`,
    );
    console.log(
      `rows: ${Object.entries(rows)
        .map(([t, n]) => `${t} ${n.toLocaleString('en')}`)
        .join(', ')}\n`,
    );
    const cpuRatio = median(exports.map((e) => e.cpuS)) / median(csvs.map((c) => c.cpuS));
    console.log(
      '| contestant | users | wall s | CPU s | peak RSS MB | output MB | bytes per user | vs sqlite3 -csv (wall; CPU) | goal | met |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---|---|');
    const peak = Math.max(...exports.map((e) => e.rssMb));
    console.log(
      `| \`user-mirror export\` (Parquet, 4 tables, checked) | ${users} | ${s(median(exports.map((e) => e.s)))} | ` +
        `${s(median(exports.map((e) => e.cpuS)))} | ${mb(peak)} | ${mb(parquetBytes / 1_048_576)} | ${(parquetBytes / USERS).toFixed(0)} | ` +
        `${ratio.toFixed(2)}×; ${cpuRatio.toFixed(2)}× | ≤ 2× sqlite3 -csv; RSS ≤ 200 MB | ` +
        `${ratio <= 2 && peak <= 200 ? 'yes' : 'no'} |`,
    );
    console.log(
      `| \`sqlite3 -readonly -csv\` of the same tables | ${users} | ${s(median(csvs.map((c) => c.s)))} | ${s(median(csvs.map((c) => c.cpuS)))} | ` +
        `${mb(Math.max(...csvs.map((c) => c.rssMb)))} | ${mb(csvBytes / 1_048_576)} | ${(csvBytes / USERS).toFixed(0)} | 1.00× | - | - |`,
    );
  } finally {
    await standIn?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();

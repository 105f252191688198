/**
 * `npm run bench:backup`: what a backup and a restore cost, as whole
 * processes an operator runs (`user-mirror backup`, `user-mirror restore`,
 * then the `sync --once` that brings a restored mirror up to date), on a
 * mirror of BENCH_USERS users (default 100,000) filled from the stand-in.
 * The recovery time (RTO) of the drill in docs/backup.md is the restore
 * plus that sync; the recovery point (RPO) is the backup schedule plus one
 * backup's duration. BENCH_ROUNDS rounds (default 3); medians printed.
 *
 * Prints a markdown table.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStandIn } from '../src/stand-in/index.js';

const USERS = Number(process.env.BENCH_USERS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CLI = fileURLToPath(new URL('../cli.js', import.meta.url));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-backup-'));
  const standIn = await startStandIn({ users: USERS, seed: 5, orgs: 0, membersPerOrg: 0 });
  const env = {
    ...process.env,
    ENV_FILE: '/dev/null',
    SERVICE_BASE_URL: standIn.baseUrl,
    SERVICE_API_KEY: standIn.apiKey,
    SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
    MIRROR_DB: join(dir, 'mirror.db'),
    LOG_LEVEL: 'warn',
  };
  /** One whole process, spawn to exit, in seconds; throws unless it exits 0. */
  const timed = async (args: string[]): Promise<number> => {
    const started = performance.now();
    // Not spawnSync: it would block this process's event loop, where the stand-in answers the sync.
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'ignore', 'inherit'] });
      child.on('exit', resolve);
    });
    if (code !== 0) throw new Error(`${args.join(' ')}: exit ${String(code)}`);
    return (performance.now() - started) / 1000;
  };
  try {
    const first = await timed(['sync', '--once']);
    const mirrorBytes = statSync(env.MIRROR_DB).size;
    const backups: number[] = [];
    const restores: number[] = [];
    const syncsAfter: number[] = [];
    let backupBytes = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const dest = join(dir, `backup-${round}.db`);
      backups.push(await timed(['backup', dest]));
      backupBytes = statSync(dest).size;
      restores.push(await timed(['restore', dest]));
      syncsAfter.push(await timed(['sync', '--once']));
      rmSync(dest);
      for (const name of readdirSync(dir)) if (name.startsWith('mirror.db.replaced-')) rmSync(join(dir, name));
    }
    const s = (x: number) => x.toFixed(2);
    console.log(`\nbench:backup, ${USERS.toLocaleString('en')} users, ${ROUNDS} rounds (medians), first sync ${s(first)} s\n`);
    console.log('| users | mirror MB | backup MB | backup s | restore s | sync after restore s | RTO (restore + sync) s |');
    console.log('|---:|---:|---:|---:|---:|---:|---:|');
    console.log(
      `| ${USERS.toLocaleString('en')} | ${(mirrorBytes / 1_048_576).toFixed(1)} | ${(backupBytes / 1_048_576).toFixed(1)} | ` +
        `${s(median(backups))} | ${s(median(restores))} | ${s(median(syncsAfter))} | ${s(median(restores) + median(syncsAfter))} |`,
    );
  } finally {
    await standIn.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();

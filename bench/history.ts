/**
 * `npm run bench:history`: what history (db/history.ts) costs on disk under
 * churn. The stand-in (BENCH_HISTORY_USERS users, default 20,000; after each
 * list page BENCH_HISTORY_UPDATES users updated — time zones, sources
 * connected and disconnected — and BENCH_HISTORY_CHURN added and as many
 * deleted) is synced BENCH_HISTORY_RUNS times (default 50) in process, into
 * a fresh mirror file. After the first run (the baseline: no history rows)
 * and then every 10 runs it prints the bytes `dbstat` gives history's
 * tables and indexes, the users changed so far (the change rows after the
 * baseline) and the bytes per change, beside the bytes of `users` and of
 * the change log, for scale.
 *
 * Prints a markdown table.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openMirror, type Db } from '../db/open.js';
import { sqliteRunWriter } from '../src/sync/run-writer.js';
import { ServiceClient } from '../src/service/client.js';
import { startStandIn } from '../src/stand-in/index.js';
import { runSync } from '../src/sync/engine.js';

const USERS = Number(process.env.BENCH_HISTORY_USERS ?? 20_000);
const RUNS = Number(process.env.BENCH_HISTORY_RUNS ?? 50);
const UPDATES = Number(process.env.BENCH_HISTORY_UPDATES ?? 5);
const CHURN = Number(process.env.BENCH_HISTORY_CHURN ?? 1);

/** Bytes of the named tables and their indexes (`dbstat`, every page counted whole). */
function bytesOf(db: Db, tables: readonly string[]): number {
  const names = JSON.stringify(tables);
  return (
    db
      .prepare<[string], number | null>(
        `SELECT sum(pgsize) FROM dbstat WHERE name IN (
           SELECT name FROM sqlite_schema WHERE tbl_name IN (SELECT value FROM json_each(?)))`,
      )
      .pluck()
      .get(names) ?? 0
  );
}

const MB = (n: number) => (n / 1_048_576).toFixed(2);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-bench-history-'));
  const standIn = await startStandIn({
    users: USERS,
    seed: 7,
    orgs: 0,
    membersPerOrg: 0,
    faults: { churnUpdatePerPage: UPDATES, churnAddPerPage: CHURN, churnDeletePerPage: CHURN },
  });
  const client = new ServiceClient({ baseUrl: standIn.baseUrl, apiKey: standIn.apiKey, apiKeyHeader: standIn.apiKeyHeader });
  const db = openMirror(join(dir, 'mirror.db'));
  const writer = sqliteRunWriter(db);
  const rows: string[] = [];
  try {
    for (let run = 1; run <= RUNS; run++) {
      const summary = await runSync({ client, writer });
      if (summary.status !== 'succeeded') throw new Error(`run ${run}: ${summary.status}`);
      if (run !== 1 && run % 10 !== 0) continue;
      const changes = db.prepare<[], number>(`SELECT count(*) FROM user_changes WHERE run_id > 1`).pluck().get() ?? 0;
      const history = bytesOf(db, ['user_versions', 'source_connections', 'history_state']);
      const versions = db.prepare<[], number>(`SELECT count(*) FROM user_versions`).pluck().get() ?? 0;
      const connections = db.prepare<[], number>(`SELECT count(*) FROM source_connections`).pluck().get() ?? 0;
      rows.push(
        `| ${run} | ${changes.toLocaleString('en')} | ${versions.toLocaleString('en')} | ${connections.toLocaleString('en')} | ` +
          `${MB(history)} | ${changes === 0 ? '–' : Math.round(history / changes).toLocaleString('en')} | ` +
          `${MB(bytesOf(db, ['users', 'connected_sources']))} | ${MB(bytesOf(db, ['user_changes', 'change_events']))} |`,
      );
      process.stderr.write(`run ${run} of ${RUNS}\n`);
    }
  } finally {
    await client.close();
    db.close();
    await standIn.close();
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `\n${USERS.toLocaleString('en')} users; after each list page ${UPDATES} updated, ${CHURN} added and ${CHURN} deleted; ${RUNS} runs\n`,
  );
  console.log(
    '| run | changes since the baseline | version rows | connection rows | history MB | history bytes per change | users + sources MB | change log + feed MB |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) console.log(r);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

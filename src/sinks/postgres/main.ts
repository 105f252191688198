/**
 * A PostgreSQL sink pass as a process of its own:
 * `node dist/src/sinks/postgres/main.js <mirror.db> <sink options JSON>`.
 * It brings the destination up to the mirror's feed and exits 0 (1 on an
 * error, named; 2 on bad options), logging each committed step as a JSON
 * line (`postgres.baseline`, `postgres.batch`). Until the sinks contract
 * runs sinks in the daemon, this is how the sink is run (by a timer, a
 * test, the bench); a kill at any moment leaves the destination whole.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { compileFieldPolicy } from '../field-policy.js';
import { createLogger } from '../../runtime/log.js';
import { formatIssues } from '../../runtime/zod-issues.js';
import { connectionConfig, PostgresSinkSchema } from './config.js';
import { PostgresDestination } from './destination.js';
import { replicateOnce } from './replicate.js';

export async function main(argv: readonly string[]): Promise<number> {
  const log = createLogger({ LOG_LEVEL: 'info' });
  const [mirrorPath, json] = argv;
  if (mirrorPath === undefined || json === undefined) {
    process.stderr.write('usage: main.js <mirror.db> <sink options JSON>\n');
    return 2;
  }
  let input: unknown;
  try {
    input = JSON.parse(json);
  } catch {
    process.stderr.write('sink options: not JSON\n');
    return 2;
  }
  const parsed = PostgresSinkSchema.safeParse(input);
  if (!parsed.success) {
    process.stderr.write(`sink options: ${formatIssues(parsed.error.issues)}\n`);
    return 2;
  }
  const options = parsed.data;
  let client: pg.Client | undefined;
  try {
    client = new pg.Client(connectionConfig(options));
    // A connection the server ends also fails the query in flight, which is what reports it; unheard, the event would crash the process.
    client.on('error', () => undefined);
    const policy = compileFieldPolicy(options.field_policy, (path) => readFileSync(path));
    await client.connect();
    const destination = new PostgresDestination(client, options.schema, policy);
    const result = await replicateOnce({
      mirrorPath,
      destination,
      policyId: policy.id,
      batchEvents: options.batch_events,
      onStep: (step) =>
        step.kind === 'baseline'
          ? log.info({ event: 'postgres.baseline', why: step.why, cursor: step.cursor, rows: step.counts, ms: step.ms }, 'baseline loaded')
          : log.info({ event: 'postgres.batch', from: step.from, to: step.to, events: step.events, ms: step.ms }, 'batch applied'),
    });
    log.info(
      { event: 'postgres.caught_up', cursor: result.position?.cursor, batches: result.batches, baselines: result.baselines },
      'caught up',
    );
    return 0;
  } catch (err) {
    log.error({ event: 'postgres.failed', schema: options.schema, err }, 'the PostgreSQL sink failed');
    return 1;
  } finally {
    await client?.end().catch(() => undefined);
  }
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) {
  process.exitCode = await main(process.argv.slice(2));
}

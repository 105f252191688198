/**
 * One pass of a PostgreSQL sink as a process of its own, without the
 * daemon: `node dist/src/sinks/postgres/main.js <mirror.db> <sink JSON>`,
 * the sink as its entry in SINKS_FILE gives it (`name` may be left out:
 * the schema's name then).
 * It brings the destination up to the mirror's feed and exits 0 (1 on an
 * error, named; 2 on a bad entry), logging each committed step as a JSON
 * line (`postgres.baseline`, `postgres.batch`). The daemon runs the sinks
 * of SINKS_FILE itself (./runner.ts); this serves a bench, a test, or a
 * mirror copied to another host and replicated from there on a timer. A
 * kill at any moment leaves the destination whole.
 */
import pg from 'pg';
import { createLogger } from '../../runtime/log.js';
import { parseSinks } from '../sinks-file.js';
import { connectionConfig } from './config.js';
import { PostgresDestination } from './destination.js';
import { replicateOnce } from './replicate.js';

export async function main(argv: readonly string[]): Promise<number> {
  const log = createLogger({ LOG_LEVEL: 'info' });
  const [mirrorPath, json] = argv;
  if (mirrorPath === undefined || json === undefined) {
    process.stderr.write('usage: main.js <mirror.db> <sink JSON, as in SINKS_FILE>\n');
    return 2;
  }
  let entry: unknown;
  try {
    entry = JSON.parse(json);
  } catch {
    process.stderr.write('sink: not JSON\n');
    return 2;
  }
  let sink;
  try {
    // Unnamed, the sink is named by its schema (its connection's application_name says it), as the sinks file would.
    const record = typeof entry === 'object' && entry !== null ? (entry as Record<string, unknown>) : undefined;
    const schema = typeof record?.schema === 'string' && /^[a-z0-9]/.test(record.schema) ? record.schema : 'user_mirror';
    const named = record !== undefined && !('name' in record) ? { name: schema, ...record } : entry;
    sink = parseSinks({ sinks: [named] }, process.env, 'sink')[0];
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 2;
  }
  if (sink?.kind !== 'postgres') {
    process.stderr.write('sink: kind must be "postgres"\n');
    return 2;
  }
  let client: pg.Client | undefined;
  try {
    client = new pg.Client(connectionConfig(sink));
    // A connection the server ends also fails the query in flight, which is what reports it; unheard, the event would crash the process.
    client.on('error', () => undefined);
    await client.connect();
    const destination = new PostgresDestination(client, sink.schema, sink.policy);
    const result = await replicateOnce({
      mirrorPath,
      destination,
      policyId: sink.policy.id,
      batchEvents: sink.batchEvents,
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
    log.error({ event: 'postgres.failed', schema: sink.schema, err }, 'the PostgreSQL sink failed');
    return 1;
  } finally {
    await client?.end().catch(() => undefined);
  }
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) {
  process.exitCode = await main(process.argv.slice(2));
}

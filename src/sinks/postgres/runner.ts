/**
 * A PostgreSQL sink in the daemon: a runner, as ../runner.ts is, for a
 * destination that is a replica of the whole mirror rather than a log of
 * events. Each pass is ./replicate.ts `replicateOnce` (a baseline by COPY
 * when the destination has none or cannot continue, then the feed applied
 * in batches, each in one transaction with its position). Nothing is
 * remembered here that PostgreSQL does not hold: after every error the
 * connection is dropped and the next pass reads the position back, so a
 * kill -9 at any moment repeats nothing and loses nothing.
 *
 * The loop is ../sink-loop.ts, as every sink's: the daemon starts, nudges,
 * reports and closes it like the others (a pass after each sync publishes
 * and every POLL_MS, a backoff up to 5 s while PostgreSQL is down or
 * refuses, the failure named in status, /metrics and the logs, the feed's
 * retention held at the position the destination last said).
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../../db/change-feed.js';
import { SinkLoop } from '../sink-loop.js';
import type { PostgresSink } from '../sinks-file.js';
import { connectionConfig, describePostgres } from './config.js';
import { PostgresDestination } from './destination.js';
import { replicateOnce, type ReplicateStep } from './replicate.js';
import { q } from './schema.js';

/** How long close() lets a step in flight commit before it ends the connection (PostgreSQL then rolls it back). */
const CLOSE_GRACE_MS = 2_000;

export class PostgresSinkRunner extends SinkLoop {
  private client: pg.Client | undefined;
  private destination: PostgresDestination | undefined;

  constructor(
    feed: ChangeFeed,
    private readonly mirrorPath: string,
    private readonly sink: PostgresSink,
    log: Logger,
    private readonly onDelivered: (n: number) => void = () => undefined,
  ) {
    super(feed, log, { name: sink.name, kind: 'postgres', where: describePostgres(sink), policy: sink.policy.id });
  }

  protected work(): Promise<void> {
    return this.replicate();
  }

  private async connect(): Promise<PostgresDestination> {
    if (this.destination !== undefined) return this.destination;
    const client = new pg.Client(connectionConfig(this.sink));
    // A connection the server ends also fails the query in flight, which reports it; unheard, the event would end the daemon.
    client.on('error', () => undefined);
    this.client = client;
    await client.connect();
    const destination = new PostgresDestination(client, this.sink.schema, this.sink.policy);
    await destination.ensureSchema();
    const position = await destination.readPosition();
    this.s.position = position?.cursor ?? 0;
    this.s.scanned = this.s.position;
    this.destination = destination;
    this.log.info(
      { event: 'sink.started', sink: this.s.name, kind: 'postgres', where: this.s.where, position: this.s.position, policy: this.s.policy },
      `sink ${this.s.name}: postgres at ${this.s.where}, from cursor ${this.s.position}`,
    );
    return destination;
  }

  private async replicate(): Promise<void> {
    if (this.closed) return;
    // Caught up and connected: nothing to ask PostgreSQL (a pass every POLL_MS would otherwise open the mirror each time).
    if (this.destination !== undefined && this.s.failing === null && this.s.position === this.feed.latest()) return;
    try {
      const destination = await this.connect();
      await replicateOnce({
        mirrorPath: this.mirrorPath,
        destination,
        policyId: this.sink.policy.id,
        batchEvents: this.sink.batchEvents,
        prepared: true,
        stop: () => this.closed,
        onStep: (step) => this.stepped(step),
      });
      this.recovered();
    } catch (err) {
      if (this.closed) return;
      this.failed(err, "the mirror's changes");
      // The next pass connects again and reads the position back: what committed counts, nothing more.
      await this.disconnect();
    }
  }

  private stepped(step: ReplicateStep): void {
    if (step.kind === 'baseline') {
      this.s.position = step.cursor;
      this.log.info(
        { event: 'sink.postgres_baseline', sink: this.s.name, why: step.why, cursor: step.cursor, rows: step.counts, ms: step.ms },
        `sink ${this.s.name}: baseline loaded (${step.why})`,
      );
    } else {
      this.s.position = step.to;
      this.s.delivered += step.events;
      this.onDelivered(step.events);
      this.log.debug(
        { event: 'sink.postgres_batch', sink: this.s.name, from: step.from, to: step.to, events: step.events, ms: step.ms },
        'batch applied',
      );
    }
    this.s.scanned = this.s.position;
  }

  private async disconnect(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    this.destination = undefined;
    await c?.end().catch(() => undefined);
  }

  async close(): Promise<void> {
    const running = this.halt();
    if (running !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([running, new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_GRACE_MS)))]);
      clearTimeout(timer);
    }
    await this.disconnect();
  }
}

/**
 * The position PostgreSQL holds for `sink`, read by `status` with one
 * connection (no schema created: a destination never loaded holds none).
 */
export class PostgresPositionProbe {
  readonly where: string;
  private client: pg.Client | undefined;

  constructor(private readonly sink: PostgresSink) {
    this.where = describePostgres(sink);
  }

  async open(): Promise<void> {
    const client = new pg.Client(connectionConfig(this.sink));
    client.on('error', () => undefined);
    this.client = client;
    await client.connect();
  }

  async position(): Promise<{ cursor: number; eventId: string | null } | null> {
    const client = this.client;
    if (client === undefined) throw new Error('not open');
    const exists = await client.query<{ t: string | null }>(`SELECT to_regclass($1) AS t`, [`${q(this.sink.schema)}.sink_position`]);
    if (exists.rows[0]?.t == null) return null;
    const position = await new PostgresDestination(client, this.sink.schema, this.sink.policy).readPosition();
    return position === undefined ? null : { cursor: position.cursor, eventId: null };
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => undefined);
  }
}

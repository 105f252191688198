/**
 * A PostgreSQL sink in the daemon: the loop of ../runner.ts for a
 * destination that is a replica of the whole mirror rather than a log of
 * events. Each pass is ./replicate.ts `replicateOnce` (a baseline by COPY
 * when the destination has none or cannot continue, then the feed applied
 * in batches, each in one transaction with its position). Nothing is
 * remembered here that PostgreSQL does not hold: after every error the
 * connection is dropped and the next pass reads the position back, so a
 * kill -9 at any moment repeats nothing and loses nothing.
 *
 * It offers the runner's face (state, lag, hold, pass, close), so the
 * daemon starts, nudges, reports and closes it as every sink: a pass after
 * each sync publishes and every POLL_MS, a backoff up to 5 s while
 * PostgreSQL is down or refuses (the failure `failing`, named in status,
 * /metrics and the logs), and the feed's retention held at the position
 * the destination last said.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { ChangeFeed } from '../../../db/change-feed.js';
import { logError } from '../../runtime/log-error.js';
import type { SinkLag, SinkState } from '../runner.js';
import type { PostgresSink } from '../sinks-file.js';
import { connectionConfig, describePostgres } from './config.js';
import { PostgresDestination } from './destination.js';
import { replicateOnce, type ReplicateStep } from './replicate.js';
import { q } from './schema.js';

const POLL_MS = 200;
const MAX_BACKOFF_MS = 5_000;
/** How long close() lets a step in flight commit before it ends the connection (PostgreSQL then rolls it back). */
const CLOSE_GRACE_MS = 2_000;

export class PostgresSinkRunner {
  private readonly s: SinkState;
  private client: pg.Client | undefined;
  private destination: PostgresDestination | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private closed = false;
  private backoffMs = 0;

  constructor(
    private readonly feed: ChangeFeed,
    private readonly mirrorPath: string,
    private readonly sink: PostgresSink,
    private readonly log: Logger,
    private readonly onDelivered: (n: number) => void = () => undefined,
  ) {
    this.s = {
      name: sink.name,
      kind: 'postgres',
      where: describePostgres(sink),
      policy: sink.policy.id,
      position: null,
      scanned: 0,
      delivered: 0,
      failing: null,
      stopped: null,
    };
  }

  state(): Readonly<SinkState> {
    return this.s;
  }

  start(): void {
    const loop = (): void => {
      if (this.closed) return;
      void this.pass().finally(() => {
        if (this.closed) return;
        this.timer = setTimeout(loop, this.s.failing === null ? POLL_MS : this.backoffMs);
        this.timer.unref();
      });
    };
    loop();
  }

  /** Brings the destination up to the feed (one pass at a time); resolves when caught up or failed. */
  pass(): Promise<void> {
    this.running ??= this.replicate().finally(() => (this.running = undefined));
    return this.running;
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
      if (this.s.failing !== null)
        this.log.info(
          { event: 'sink.recovered', sink: this.s.name, where: this.s.where, since: this.s.failing.since },
          `sink ${this.s.name}: delivering again`,
        );
      this.s.failing = null;
      this.backoffMs = 0;
    } catch (err) {
      if (this.closed) return;
      const last = err instanceof Error ? err.message : String(err);
      if (this.s.failing === null)
        logError(
          this.log,
          'error',
          { event: 'sink.failing', sink: this.s.name, where: this.s.where, err },
          `sink ${this.s.name}: ${this.s.where} does not take the mirror's changes; holding them`,
        );
      this.s.failing = { since: this.s.failing?.since ?? new Date().toISOString(), last };
      this.backoffMs = Math.min(MAX_BACKOFF_MS, Math.max(250, this.backoffMs * 2));
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

  /** Events after the destination's position, and since the first of them was published. */
  lag(now: Date): SinkLag {
    const at = this.s.position ?? 0;
    const eventsBehind = Math.max(0, this.feed.latest() - at);
    if (eventsBehind === 0) return { eventsBehind: 0, secondsBehind: 0 };
    const first = this.feed.publishedAfter(at);
    return { eventsBehind, secondsBehind: first === undefined ? 0 : Math.max(0, Math.round((now.getTime() - Date.parse(first)) / 1000)) };
  }

  /** What retention may drop: up to the position PostgreSQL last said; nothing while that is unknown. */
  hold(): number {
    return this.s.position ?? 0;
  }

  private async disconnect(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    this.destination = undefined;
    await c?.end().catch(() => undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    const running = this.running;
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

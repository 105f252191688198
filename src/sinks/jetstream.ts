/**
 * The NATS JetStream kind (@nats-io/jetstream over @nats-io/transport-node).
 *
 * - Subject: `<subject_prefix>.<team_id>.<event type>`, e.g.
 *   `user-mirror.6f1c….user.updated`; `mirror.*` events go to
 *   `<subject_prefix>._mirror.<type>`. A team id character a subject cannot
 *   carry (`.`, `*`, `>`, space) becomes `_`.
 * - Each message: `Nats-Msg-Id` = the event id (the stream drops a repeat
 *   within its duplicate window) and the expected last message id = the
 *   previous event's id, so a publish after anything but the event before
 *   it is refused, past the window too: no gap, no repeat, order kept. The
 *   first publish into an empty stream expects its last sequence instead.
 *   Headers `User-Mirror-Cursor`, `User-Mirror-Event-Type` and
 *   `User-Mirror-Field-Policy` travel beside the event JSON.
 * - The stream (file storage) is created at start when absent, or checked:
 *   it must take `<subject_prefix>.>` and store on disk.
 * - The position is the stream's last message, its Nats-Msg-Id.
 *
 * The NATS client loads at the first open: a daemon without a JetStream sink never loads it.
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import { cursorOfEventId, type Destination, type DestinationPosition, type OutgoingEvent, type RereadHint } from './contract.js';
import type { JetStreamSink } from './sinks-file.js';

const STREAM_NOT_FOUND = 10059;
const TIMEOUT_MS = 10_000;

/** The subject an event is published on. */
function subjectOf(prefix: string, teamId: string | null, type: string): string {
  const team = teamId === null ? '_mirror' : teamId.replace(/[.*>\s]/g, '_') || '_';
  return `${prefix}.${team}.${type}`;
}

export class JetStreamDestination implements Destination {
  readonly where: string;
  private nc: NatsConnection | undefined;
  private js: JetStreamClient | undefined;
  private jsm: JetStreamManager | undefined;
  /** The stream's last sequence as position() read it: what the first publish into it expects when no message of ours is there. */
  private lastSeq = 0;
  private headers: (() => MsgHdrs) | undefined;

  constructor(private readonly sink: JetStreamSink) {
    this.where = `${sink.servers.join(',')} stream ${sink.stream}`;
  }

  async open(): Promise<void> {
    const [{ connect, credsAuthenticator, headers, nanos }, { jetstream, jetstreamManager, JetStreamApiError, StorageType }] =
      await Promise.all([import('@nats-io/transport-node'), import('@nats-io/jetstream')]);
    this.headers = headers;
    const s = this.sink;
    const options: NodeConnectionOptions = {
      servers: s.servers,
      name: `user-mirror:sink:${s.name}`,
      timeout: TIMEOUT_MS,
      // The runner reconnects (and re-reads the position) after an error; a connection that waits
      // for the server by itself would hold a publish in doubt for longer.
      reconnect: false,
    };
    if (s.auth.user !== undefined) options.user = s.auth.user;
    if (s.auth.pass !== undefined) options.pass = s.auth.pass;
    if (s.auth.token !== undefined) options.token = s.auth.token;
    if (s.auth.creds !== undefined) options.authenticator = credsAuthenticator(new TextEncoder().encode(s.auth.creds));
    if (s.tls !== undefined) options.tls = { ...s.tls };
    const nc = await connect(options);
    this.nc = nc;
    const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
    this.jsm = jsm;
    const subjects = `${s.subjectPrefix}.>`;
    try {
      const info = await jsm.streams.info(s.stream);
      if (!info.config.subjects.includes(subjects))
        throw new Error(`stream ${s.stream} does not take ${subjects} (its subjects: ${info.config.subjects.join(', ')})`);
      if (info.config.storage !== StorageType.File)
        throw new Error(`stream ${s.stream} stores in memory: a server restart loses its events; give the sink a file-storage stream`);
    } catch (err) {
      if (!(err instanceof JetStreamApiError) || err.code !== STREAM_NOT_FOUND) throw err;
      await jsm.streams.add({
        name: s.stream,
        subjects: [subjects],
        storage: StorageType.File,
        num_replicas: s.replicas,
        duplicate_window: nanos(s.duplicateWindowMs),
        ...(s.maxAgeMs === undefined ? {} : { max_age: nanos(s.maxAgeMs) }),
      });
    }
    this.js = jetstream(nc, { timeout: TIMEOUT_MS });
  }

  async position(): Promise<DestinationPosition | null> {
    if (this.jsm === undefined) throw new Error('not open');
    const info = await this.jsm.streams.info(this.sink.stream);
    this.lastSeq = info.state.last_seq;
    if (info.state.messages === 0) return null;
    const msg = await this.jsm.streams.getMessage(this.sink.stream, { seq: info.state.last_seq });
    if (msg === null) return null;
    const id = msg.header.get('Nats-Msg-Id');
    const cursor = cursorOfEventId(id);
    if (cursor === undefined)
      throw new Error(
        `stream ${this.sink.stream}'s last message (sequence ${info.state.last_seq}) is not a user-mirror event: give the sink its own stream`,
      );
    return { cursor, eventId: id };
  }

  async append(events: readonly OutgoingEvent[], after: DestinationPosition | null): Promise<void> {
    const js = this.js;
    const headers = this.headers;
    if (js === undefined || headers === undefined) throw new Error('not open');
    let previous = after?.eventId ?? null;
    // Sent back to back: each expects the one before it, so a refusal stops every later one too (no gap).
    const acks = events.map((e) => {
      const h = headers();
      h.set('User-Mirror-Cursor', String(e.cursor));
      h.set('User-Mirror-Event-Type', e.type);
      h.set('User-Mirror-Field-Policy', e.policy);
      const expect = previous === null ? { lastSequence: this.lastSeq } : { lastMsgID: previous };
      previous = e.id;
      return js.publish(subjectOf(this.sink.subjectPrefix, e.teamId, e.type), e.body, { msgID: e.id, headers: h, expect });
    });
    const settled = await Promise.allSettled(acks);
    for (const [i, r] of settled.entries()) {
      if (r.status === 'rejected') throw r.reason instanceof Error ? r.reason : new Error(String(r.reason));
      if (r.value.duplicate)
        throw new Error(`event ${events[i]?.id ?? '?'} was already in stream ${this.sink.stream}: reading the position again`);
    }
  }

  /** The cursor of the stream's message at `seq` (its Nats-Msg-Id), or undefined when none is there. */
  private async cursorAt(jsm: JetStreamManager, seq: number): Promise<number | undefined> {
    const msg = await jsm.streams.getMessage(this.sink.stream, { seq }).catch(() => null);
    return msg === null ? undefined : cursorOfEventId(msg.header.get('Nats-Msg-Id'));
  }

  async rereadFrom(from: number): Promise<RereadHint> {
    const jsm = this.jsm;
    if (jsm === undefined) throw new Error('not open');
    const { state } = await jsm.streams.info(this.sink.stream);
    if (state.messages === 0) return { oldest: null, how: [] };
    const oldest = (await this.cursorAt(jsm, state.first_seq)) ?? null;
    // Cursors rise with the sequence: the first message at or after `from`, by bisection (a missing message reads as later).
    let lo = state.first_seq;
    let hi = state.last_seq + 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const c = await this.cursorAt(jsm, mid);
      if (c !== undefined && c < from) lo = mid + 1;
      else hi = mid;
    }
    const s = this.sink.stream;
    return {
      oldest,
      how: [
        `nats consumer add ${s} <name> --pull --deliver ${lo} --ack explicit --defaults    (stream sequence ${lo} is cursor ${from} or the first after it)`,
        `or with @nats-io/jetstream: jsm.consumers.add('${s}', { durable_name: '<name>', deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: ${lo}, ack_policy: AckPolicy.Explicit })`,
      ],
    };
  }

  async close(): Promise<void> {
    const nc = this.nc;
    this.nc = undefined;
    this.js = undefined;
    this.jsm = undefined;
    await nc?.close().catch(() => undefined);
  }
}

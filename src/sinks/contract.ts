/**
 * The sink contract: what every kind of destination (Redis Streams, NATS
 * JetStream; webhooks are delivered through their BullMQ queues, jobs/webhooks,
 * src/daemon/change-delivery.ts, with the same filter and policy) offers the one runner
 * (./runner.ts), and the pure decisions around it: which events a sink's
 * filter admits, and the event as it leaves (its field policy applied).
 *
 * A destination holds its own position: the cursor (and id) of the last
 * event it accepted, read back at every start and after every error, so a
 * daemon killed at any moment resumes exactly where the destination says,
 * and a repeated append is refused by the destination itself.
 */
import type { ChangeEventType } from '../../db/change-event.js';
import type { FeedEvent } from '../../db/change-feed.js';
import type { FieldPolicy } from './field-policy.js';

export type SinkKind = 'redis_stream' | 'jetstream' | 'webhook' | 'postgres';

/** The last event a destination holds. */
export interface DestinationPosition {
  cursor: number;
  /** The event id (`evt_<epoch>_<cursor>`), where the destination keeps it. */
  eventId: string | null;
}

/** One event as it leaves: the policy applied, with what destinations route and state by. */
export interface OutgoingEvent {
  cursor: number;
  id: string;
  type: ChangeEventType;
  /** The user's team; null for `mirror.*` events. */
  teamId: string | null;
  /** The event JSON, the field policy applied. */
  body: string;
  /** The field policy's `<name>:<fingerprint>`, stated beside the event (a field, a header). */
  policy: string;
}

/** A destination as the runner drives it: one kind, one file (./redis-stream.ts, ./jetstream.ts). */
export interface Destination {
  /** Where, for logs and status: never a password or token. */
  readonly where: string;
  /** Connects and checks (or creates) what the destination needs; throws what is wrong. */
  open(): Promise<void>;
  /** The last event the destination holds, or null when it holds none of this mirror's. */
  position(): Promise<DestinationPosition | null>;
  /**
   * Appends events in cursor order, after `after` (what position() said, or
   * the last appended). All or a prefix land, never a later one without an
   * earlier; a repeat of one held is refused by the destination.
   */
  append(events: readonly OutgoingEvent[], after: DestinationPosition | null): Promise<void>;
  /**
   * For `sinks replay` (./replay.ts): the cursor of the oldest event the
   * destination still holds (null: none), and how a consumer re-reads it
   * from cursor `from` on, lines for an operator. A destination that holds
   * the position by id refuses a re-append, so a replay is a consumer's.
   */
  rereadFrom(from: number): Promise<RereadHint>;
  close(): Promise<void>;
}

export interface RereadHint {
  oldest: number | null;
  how: string[];
}

/** Which events a sink takes: by type, by team; absent lists admit all. */
export interface SinkFilter {
  types?: readonly ChangeEventType[] | undefined;
  teams?: readonly string[] | undefined;
}

/**
 * Whether `filter` admits an event. A `mirror.restored` event reaches every
 * sink (a consumer must learn that events were lost in a restore), and
 * `mirror.*` events belong to no team, so a team filter lets them through.
 */
export function admits(filter: SinkFilter, type: ChangeEventType, teamId: string | null): boolean {
  if (type === 'mirror.restored') return true;
  if (filter.types !== undefined && !filter.types.includes(type)) return false;
  if (filter.teams !== undefined && teamId !== null && !filter.teams.includes(teamId)) return false;
  return true;
}

/**
 * The team id of a stored event body: the first `"team_id":"` is the one in
 * `data` (it precedes the record, and a quote inside any string is escaped,
 * so the pattern cannot occur within a value). Null for events without one.
 */
export function teamIdOf(body: string): string | null {
  const at = body.indexOf('"team_id":"');
  if (at < 0) return null;
  const start = at + 10;
  let end = body.indexOf('"', start + 1);
  while (end > 0 && body[end - 1] === '\\') end = body.indexOf('"', end + 1);
  if (end < 0) return null;
  return JSON.parse(body.slice(start, end + 1)) as string;
}

/** The events of a page a sink sends, as they leave. */
export function outgoing(events: readonly FeedEvent[], filter: SinkFilter, policy: FieldPolicy): OutgoingEvent[] {
  const out: OutgoingEvent[] = [];
  for (const e of events) {
    const teamId = e.type.startsWith('mirror.') ? null : teamIdOf(e.body);
    if (!admits(filter, e.type, teamId)) continue;
    out.push({ cursor: e.cursor, id: e.id, type: e.type, teamId, body: policy.applyToEvent(e.body), policy: policy.id });
  }
  return out;
}

/** The cursor an event id names (`evt_<epoch>_<cursor>`), or undefined for another shape. */
export function cursorOfEventId(id: string): number | undefined {
  const m = /^evt_[0-9a-f]+_([0-9]+)$/.exec(id);
  if (m === null) return undefined;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/**
 * `user-mirror sinks [--json]`: the sinks of SINKS_FILE (docs/sinks.md), a
 * line each: kind, destination, field policy, the position its destination
 * holds and how far behind the feed it is, read from the destination itself
 * (the daemon need not run); with WEBHOOK_URL set, a webhook replay still in
 * its queue too.
 *
 * `user-mirror sinks replay <name> --from <cursor> | --since <time>`:
 * re-sends from a point, at least once (src/sinks/replay.ts says what each
 * kind does). `<name>` is a sink of SINKS_FILE, or `webhook` for the
 * WEBHOOK_URL receiver.
 *
 * Exit codes: 0 every sink delivers (replay: queued, or the sink re-sends by
 * itself); 1 a sink needs attention (its destination does not answer or
 * refuses, it is behind the feed's retention, or it lags past
 * WEBHOOK_LAG_WARN_SECONDS), or a replay was refused (a point outside the
 * feed, a destination that holds the events: re-read there, or trimmed
 * them); 2 usage or configuration (SINKS_FILE unset or invalid, no sink of
 * that name).
 */
import { z } from 'zod';
import type { Logger } from 'pino';
import { parseCommandArgs, UsageError } from './args.js';
import { ConfigError, ConfigPass, readConfig } from '../runtime/config.js';
import { createLogger } from '../runtime/log.js';
import { openMirror, type Db } from '../../db/open.js';
import { openChangeFeed, type ChangeFeed } from '../../db/change-feed.js';
import { QUEUE_ENV, queueSettingsFromConfig } from '../../jobs/redis-connection.js';
import { withCommandRedis } from '../../jobs/command-redis.js';
import { webhookTarget, type WebhookTarget } from '../../jobs/webhooks/contract.js';
import { createWebhookQueue } from '../../jobs/webhooks/queue-handle.js';
import { readReplay, replayPending } from '../../jobs/webhooks/replay.js';
import { formatSinkStatus, readSinkStatus } from '../sinks/sink-status.js';
import { sinksOf, type SinkSettings } from '../sinks/sinks-file.js';
import { replayDestination, replayStart, replayWebhookQueue, type ReplayPoint } from '../sinks/replay.js';
import { destinationOf, type EventLogSink } from '../sinks/start.js';

/** The WEBHOOK_URL receiver's name as `sinks replay` takes it. */
export const WEBHOOK_SINK_NAME = 'webhook';

const Args = z
  .object({
    json: z.boolean().default(false),
    from: z
      .string()
      .regex(/^[1-9][0-9]{0,15}$/, 'must be a cursor (a positive integer, as `changes` prints it)')
      .transform(Number)
      .optional(),
    since: z
      .string()
      .refine((s) => /^\d{4}-\d{2}-\d{2}/.test(s) && !Number.isNaN(Date.parse(s)), 'must be an ISO 8601 time (2026-11-28T09:00:00Z)')
      .transform((s) => new Date(s).toISOString())
      .optional(),
    positionals: z.union([z.tuple([]), z.tuple([z.literal('replay'), z.string().min(1, 'the sink to replay')])], {
      error: "expected nothing, or 'replay <name>'",
    }),
  })
  .superRefine((a, ctx) => {
    const replay = a.positionals[0] === 'replay';
    if (!replay && (a.from !== undefined || a.since !== undefined))
      ctx.addIssue({ code: 'custom', path: [a.from !== undefined ? 'from' : 'since'], message: 'only with replay <name>' });
    if (replay && (a.from === undefined) === (a.since === undefined))
      ctx.addIssue({ code: 'custom', path: ['from'], message: 'replay needs --from <cursor> or --since <time>, one of them' });
  });

export default async function sinks(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { json: { type: 'boolean' }, from: { type: 'string' }, since: { type: 'string' } }, Args);
  if (args.positionals[0] === 'replay') {
    const point: ReplayPoint = args.from !== undefined ? { from: args.from } : { since: args.since ?? '' };
    return replay(args.positionals[1] ?? '', point, args.json);
  }
  const pass = new ConfigPass([
    ...QUEUE_ENV,
    'MIRROR_ID',
    'MIRROR_DB',
    'SINKS_FILE',
    'TLS_BY_PROXY',
    'WEBHOOK_LAG_WARN_SECONDS',
    'WEBHOOK_URL',
  ]);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  const list = pass.check(['SINKS_FILE'], (c) => sinksOf(c)) ?? [];
  const config = pass.done();
  if (config.SINKS_FILE === undefined) throw new ConfigError(['SINKS_FILE: is required (the file naming the sinks, docs/sinks.md)']);
  return withFeed(config.MIRROR_DB, async (feed) => {
    const now = new Date();
    // Webhook sinks' positions are in their queues (the queues' Redis).
    const queues = { ...queueSettingsFromConfig(config), mirrorId: config.MIRROR_ID };
    const rows = await Promise.all(list.map((s) => readSinkStatus(feed, s, config.WEBHOOK_LAG_WARN_SECONDS, now, queues)));
    const replays = args.json ? [] : await webhookReplayLines(list);
    process.stdout.write(
      args.json
        ? `${JSON.stringify({ sinks: rows }, null, 2)}\n`
        : [...rows.map((r) => `${formatSinkStatus(r)}\n`), ...replays.map((l) => `${l}\n`)].join(''),
    );
    return rows.some((r) => r.problem !== null) ? 1 : 0;
  });
}

async function withFeed<T>(path: string, use: (feed: ChangeFeed | undefined) => Promise<T>): Promise<T> {
  let db: Db | undefined;
  try {
    db = openMirror(path, { readonly: true });
  } catch {
    db = undefined;
  }
  try {
    return await use(db === undefined ? undefined : openChangeFeed(db));
  } finally {
    db?.close();
  }
}

/** The webhook queues' targets by sink name: WEBHOOK_URL's as `webhook`, and each webhook sink of SINKS_FILE. */
function webhookTargets(list: readonly SinkSettings[], webhookUrl: string | undefined): Map<string, WebhookTarget> {
  const targets = new Map<string, WebhookTarget>();
  if (webhookUrl !== undefined) targets.set(WEBHOOK_SINK_NAME, webhookTarget(webhookUrl));
  for (const s of list) if (s.kind === 'webhook') targets.set(s.name, webhookTarget(s.url, { sink: s.name }));
  return targets;
}

/** Each webhook queue's latest replay while jobs of it wait: `sink webhook: replay 3 in progress …`; nothing when Redis is away. */
async function webhookReplayLines(list: readonly SinkSettings[]): Promise<string[]> {
  try {
    const config = readConfig([...QUEUE_ENV, 'WEBHOOK_URL', 'MIRROR_ID']);
    const targets = webhookTargets(list, config.WEBHOOK_URL);
    if (targets.size === 0) return [];
    const { endpoint, prefix } = queueSettingsFromConfig(config);
    return await withCommandRedis(endpoint, 'user-mirror:sinks', async ({ redis, track }) => {
      const lines: string[] = [];
      for (const [name, target] of targets) {
        const queue = track(createWebhookQueue(redis, { mirrorId: config.MIRROR_ID, target, prefix, readOnly: true }));
        const r = await readReplay(queue);
        if (r === null || r.events === 0) continue;
        const pending = await replayPending(queue, r.replay);
        if (pending > 0)
          lines.push(
            `sink ${name} (webhook, ${target.url}): replay ${r.replay} in progress, ${pending} of ${r.events} events from cursor ${r.from} to ${r.through} still to send (began ${r.at})`,
          );
      }
      return lines;
    });
  } catch {
    return [];
  }
}

async function replay(name: string, point: ReplayPoint, json: boolean): Promise<number> {
  const pass = new ConfigPass(['MIRROR_DB', 'SINKS_FILE', 'TLS_BY_PROXY', 'WEBHOOK_URL', 'LOG_LEVEL']);
  const list = pass.check(['SINKS_FILE'], (c) => sinksOf(c)) ?? [];
  const config = pass.done();
  const sink = list.find((s) => s.name === name);
  const webhook = sink === undefined && name === WEBHOOK_SINK_NAME && config.WEBHOOK_URL !== undefined;
  if (sink === undefined && !webhook) {
    const names = [...list.map((s) => s.name), ...(config.WEBHOOK_URL === undefined ? [] : [WEBHOOK_SINK_NAME])];
    throw new UsageError(
      `argument 2: no sink named ${JSON.stringify(name)} (${names.length === 0 ? 'no sinks are configured: SINKS_FILE, WEBHOOK_URL' : `the sinks: ${names.join(', ')}`})`,
    );
  }
  const log = createLogger(config, process.stderr);
  return withFeed(config.MIRROR_DB, async (feed) => {
    if (feed === undefined) {
      process.stderr.write(`the mirror ${config.MIRROR_DB} has no change feed to replay from\n`);
      return 1;
    }
    const start = replayStart(feed, point);
    if (!start.ok) {
      process.stderr.write(`replay of sink ${name} refused: ${start.problem}\n`);
      return 1;
    }
    if (sink?.kind === 'postgres') {
      process.stderr.write(
        `replay of sink ${name} refused: a postgres sink is a replica of the mirror, not a log of its events: it holds every change already, and replaying events would apply them twice. To load it again, drop its schema: the sink rebaselines (docs/postgres.md)\n`,
      );
      return 1;
    }
    if (sink !== undefined && sink.kind !== 'webhook') return replayHeldById(sink, start.from, log, json);
    const target = webhookTargets(sink === undefined ? [] : [sink], sink === undefined ? config.WEBHOOK_URL : undefined).get(name);
    if (target === undefined) throw new Error(`no webhook queue for sink ${name}`);
    return replayWebhook(feed, start.from, log, json, name, target);
  });
}

/** Redis Streams, JetStream: the destination holds the position by id; nothing is re-appended (src/sinks/replay.ts). */
async function replayHeldById(sink: EventLogSink, from: number, log: Logger, json: boolean): Promise<number> {
  const destination = destinationOf(sink, log, true);
  try {
    await destination.open();
    const r = await replayDestination(destination, from);
    log.info(
      { event: 'sink.replay', sink: sink.name, kind: sink.kind, from, ...r },
      `sink ${sink.name}: replay from cursor ${from}: ${r.outcome}`,
    );
    if (json) process.stdout.write(`${JSON.stringify({ sink: sink.name, kind: sink.kind, from, ...r })}\n`);
    else if (r.outcome === 'behind')
      process.stdout.write(
        `sink ${sink.name}: ${destination.where} holds up to cursor ${r.position}, before ${from}: the sink re-sends from there by itself (the daemon delivers it)\n`,
      );
    else if (r.outcome === 'trimmed')
      process.stderr.write(
        `replay of sink ${sink.name} refused: ${destination.where} holds its position at cursor ${r.position} but no longer the events from ${from} (its oldest: ${r.oldest ?? 'none'}; trimmed by its retention): a re-append would break the entry id = cursor rule. To re-fill it, give the sink a new stream: it starts at the oldest event the feed holds\n`,
      );
    else
      process.stderr.write(
        `replay of sink ${sink.name} refused: ${destination.where} holds the events from cursor ${from} (up to ${r.position}) and refuses to take them again by design (their ids are their cursors). A consumer re-reads them there:\n${r.how.map((l) => `  ${l}\n`).join('')}`,
      );
    return r.outcome === 'behind' ? 0 : 1;
  } catch (err) {
    process.stderr.write(`replay of sink ${sink.name}: ${destination.where}: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await destination.close().catch(() => undefined);
  }
}

async function replayWebhook(
  feed: ChangeFeed,
  from: number,
  log: Logger,
  json: boolean,
  name: string,
  target: WebhookTarget,
): Promise<number> {
  const config = readConfig([...QUEUE_ENV, 'MIRROR_ID', 'CHANGES_RETENTION_DAYS']);
  const { endpoint, prefix } = queueSettingsFromConfig(config);
  return withCommandRedis(endpoint, 'user-mirror:sinks', async ({ redis, track }) => {
    const queue = track(createWebhookQueue(redis, { mirrorId: config.MIRROR_ID, target, prefix }));
    const r = await replayWebhookQueue(feed, queue, from, config.CHANGES_RETENTION_DAYS, log, name);
    if (json) process.stdout.write(`${JSON.stringify({ sink: name, kind: 'webhook', ...r })}\n`);
    else if (r.events === 0)
      process.stdout.write(
        `sink ${name}: the receiver has been sent events up to cursor ${r.through}, before ${from}: the rest are queued or to be dispatched, and go in turn\n`,
      );
    else
      process.stdout.write(
        `sink ${name}: replay ${r.replay} queued ${r.events} events, cursors ${r.from} to ${r.through}, after the deliveries waiting (at least once: same webhook-id as before)\n`,
      );
    return 0;
  });
}

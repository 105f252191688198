/**
 * `user-mirror sinks [--json]`: the sinks of SINKS_FILE (docs/sinks.md), a
 * line each: kind, destination, field policy, the position its destination
 * holds and how far behind the feed it is, read from the destination itself
 * (the daemon need not run).
 *
 * Exit codes: 0 every sink delivers; 1 a sink needs attention (its
 * destination does not answer or refuses, it is behind the feed's retention,
 * or it lags past WEBHOOK_LAG_WARN_SECONDS); 2 usage or configuration
 * (SINKS_FILE unset or invalid).
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { ConfigError, ConfigPass } from '../runtime/config.js';
import { openMirror, type Db } from '../../db/open.js';
import { openChangeFeed } from '../../db/change-feed.js';
import { formatSinkStatus, readSinkStatus } from '../sinks/sink-status.js';
import { sinksOf } from '../sinks/sinks-file.js';
import { QUEUE_ENV, queueSettingsFromConfig } from '../../jobs/redis-connection.js';

const Args = z.object({
  json: z.boolean().default(false),
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

export default async function sinks(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { json: { type: 'boolean' } }, Args);
  const pass = new ConfigPass([...QUEUE_ENV, 'MIRROR_ID', 'MIRROR_DB', 'SINKS_FILE', 'TLS_BY_PROXY', 'WEBHOOK_LAG_WARN_SECONDS']);
  pass.check(QUEUE_ENV, queueSettingsFromConfig);
  const list = pass.check(['SINKS_FILE'], (c) => sinksOf(c)) ?? [];
  const config = pass.done();
  if (config.SINKS_FILE === undefined) throw new ConfigError(['SINKS_FILE: is required (the file naming the sinks, docs/sinks.md)']);
  let db: Db | undefined;
  try {
    db = openMirror(config.MIRROR_DB, { readonly: true });
  } catch {
    db = undefined;
  }
  try {
    const feed = db === undefined ? undefined : openChangeFeed(db);
    const now = new Date();
    // Webhook sinks' positions are in their queues (the queues' Redis).
    const queues = { ...queueSettingsFromConfig(config), mirrorId: config.MIRROR_ID };
    const rows = await Promise.all(list.map((s) => readSinkStatus(feed, s, config.WEBHOOK_LAG_WARN_SECONDS, now, queues)));
    process.stdout.write(
      args.json ? `${JSON.stringify({ sinks: rows }, null, 2)}\n` : rows.map((r) => `${formatSinkStatus(r)}\n`).join(''),
    );
    return rows.some((r) => r.problem !== null) ? 1 : 0;
  } finally {
    db?.close();
  }
}

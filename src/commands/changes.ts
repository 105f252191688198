/**
 * `user-mirror changes [--after CURSOR] [--limit N] [--follow] [--json]`
 *
 * Prints the mirror's change feed (db/change-feed.ts) from MIRROR_DB, read
 * only: every event after CURSOR (default: from the oldest the feed holds), in
 * cursor order. `--json` prints each event as one JSON line, exactly the
 * body a webhook receives (it carries its `cursor`); otherwise one line per
 * event for a terminal. `--limit N` stops after N events. `--follow` keeps
 * polling for new events until SIGINT/SIGTERM, like `tail -f`; a consumer
 * that restarts passes the last cursor it handled as `--after`.
 *
 * Exit codes: 0 ok (also after SIGINT with --follow), 1 the cursor is older
 * than the feed's retention (events after it were dropped; the message
 * gives the oldest cursor still held) or the mirror cannot be read,
 * 2 usage or configuration error.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig } from '../runtime/config.js';
import { openMirror, type Db } from '../../db/open.js';
import { openChangeFeed, type ChangeFeed, type FeedEvent, type FeedPage } from '../../db/change-feed.js';

const Args = z.object({
  after: z.coerce
    .number({ error: 'must be a cursor (a whole number)' })
    .int('must be a cursor (a whole number)')
    .min(0, 'must be 0 or more')
    .optional(),
  limit: z.coerce.number({ error: 'must be a whole number' }).int('must be a whole number').min(1, 'must be at least 1').optional(),
  follow: z.boolean().optional(),
  json: z.boolean().optional(),
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
});

/** Events read per query; a page costs O(PAGE) whatever the feed's length. */
const PAGE = 1_000;
/** How often --follow looks for new events: syncs publish every few minutes, a second is plenty. */
const FOLLOW_POLL_MS = 1_000;

export default async function changes(argv: string[]): Promise<number> {
  const args = parseCommandArgs(
    argv,
    { after: { type: 'string' }, limit: { type: 'string' }, follow: { type: 'boolean' }, json: { type: 'boolean' } },
    Args,
  );
  const { MIRROR_DB } = readConfig(['MIRROR_DB']);
  // Without --follow it reads and exits, so on a full disk it may read without a -shm (db/wal-pair.ts); a follower would hold the lock.
  const db = openMirror(MIRROR_DB, { readonly: true, readWhenFull: args.follow !== true });
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const feed = openFeed(db, MIRROR_DB);
    if (feed === undefined) return 1;
    // For a person, the columns are named once, before the first event, as wide as its page needs; JSON lines carry their own names.
    let table: TextTable | undefined;
    const print = (events: readonly FeedEvent[]): string => {
      if (args.json === true) return events.map((e) => `${e.body}\n`).join('');
      const rows = events.map(row);
      const header = table === undefined ? `${(table = textTable(rows)).header}\n` : '';
      return header + rows.map((r) => `${table?.line(r) ?? ''}\n`).join('');
    };
    let after = args.after ?? feed.bounds().prunedThrough;
    let left = args.limit ?? Infinity;
    while (left > 0 && !stop.signal.aborted) {
      const page = feed.page(after, Math.min(PAGE, left));
      if (page.gone) {
        process.stderr.write(goneMessage(after, page) + '\n');
        return 1;
      }
      if (page.events.length > 0) {
        process.stdout.write(print(page.events));
      }
      after = page.next;
      left -= page.events.length;
      if (page.events.length === 0) {
        if (args.follow !== true) break;
        await sleep(FOLLOW_POLL_MS, undefined, { signal: stop.signal }).catch(() => undefined);
      }
    }
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    db.close();
  }
}

/** Why the events after `after` cannot be had, and where to resume. */
function goneMessage(after: number, page: Extract<FeedPage, { gone: true }>): string {
  const r = page.restore;
  if (r === undefined)
    return `cursor ${after} is older than the feed's retention (CHANGES_RETENTION_DAYS): events after it were dropped; the oldest cursor still held is ${page.oldest} (--after ${page.oldest})`;
  return (
    `cursor ${after} came from a mirror file that was replaced: the mirror was restored at ${r.at} from a backup taken ${r.backupAt}, ` +
    `whose feed ends at cursor ${r.backupCursor}; the events you read after it are not in this feed, and nothing is issued under their cursors again. ` +
    `Resume with --after ${page.oldest} (the next event is the mirror.restored marker) and re-read the users you changed since ${r.backupAt}`
  );
}

/** The feed, or undefined (said on stderr) when the mirror predates it: no sync has run with this version yet. */
function openFeed(db: Db, path: string): ChangeFeed | undefined {
  const feed = openChangeFeed(db);
  if (feed === undefined)
    process.stderr.write(`MIRROR_DB=${path}: this mirror has no change feed yet (written by an older version); run a sync first\n`);
  return feed;
}

/** One event for a person: `cursor  timestamp  type  client_user_id  user_id  detail`. */
interface Row {
  cursor: string;
  timestamp: string;
  type: string;
  clientUserId: string;
  userId: string;
  detail: string;
}

interface TextTable {
  header: string;
  line(row: Row): string;
}

/** Widths of the fixed columns (a cursor of 8 digits, an ISO time with ms, the longest type, a UUID). */
const CURSOR_WIDTH = 8;
const TIMESTAMP_WIDTH = 24;
const TYPE_WIDTH = 15;
const USER_ID_WIDTH = 36;

/**
 * The columns line up under their names: each is padded to its width; CLIENT_USER_ID's width is
 * the widest of the first page printed (at least its name), so only a longer id in a later page
 * (`--follow`, past 500 events) pushes that one line's last columns right.
 */
function textTable(firstPage: readonly Row[]): TextTable {
  const clientWidth = Math.max('CLIENT_USER_ID'.length, ...firstPage.map((r) => r.clientUserId.length));
  const cells = (r: Row) =>
    [
      r.cursor.padStart(CURSOR_WIDTH),
      r.timestamp.padEnd(TIMESTAMP_WIDTH),
      r.type.padEnd(TYPE_WIDTH),
      r.clientUserId.padEnd(clientWidth),
      r.userId.padEnd(USER_ID_WIDTH),
      r.detail,
    ]
      .join('  ')
      .trimEnd();
  return {
    header: cells({
      cursor: 'CURSOR',
      timestamp: 'TIMESTAMP',
      type: 'TYPE',
      clientUserId: 'CLIENT_USER_ID',
      userId: 'USER_ID',
      detail: 'DETAIL',
    }),
    line: cells,
  };
}

function row(e: FeedEvent): Row {
  const event = JSON.parse(e.body) as { timestamp: string; data: Record<string, unknown> };
  const d = event.data;
  const detail =
    e.type === 'user.updated'
      ? [
          ...listed(d['changed_fields'], (f) => `~${f}`),
          ...listed(d['sources_added'], (s) => `+${s}`),
          ...listed(d['sources_removed'], (s) => `-${s}`),
        ].join(' ')
      : e.type === 'user.deleted'
        ? String(d['reason'])
        : e.type === 'mirror.baseline'
          ? `${String(d['users'])} users`
          : e.type === 'mirror.restored'
            ? `restored from a backup taken ${String(d['backup_at'])} (its feed ended at ${String(d['backup_cursor'])})`
            : '';
  return {
    cursor: String(e.cursor),
    timestamp: event.timestamp,
    type: e.type,
    clientUserId: typeof d['client_user_id'] === 'string' ? d['client_user_id'] : '-',
    userId: e.userId ?? '-',
    detail,
  };
}

/** `~field` for a changed field, `+slug` / `-slug` for a source gained or lost. */
function listed(list: unknown, mark: (item: string) => string): string[] {
  return Array.isArray(list) ? list.map((item) => mark(String(item))) : [];
}

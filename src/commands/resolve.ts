/**
 * `user-mirror resolve <client_user_id> [--include-deleted] [--online] [--as-of <time>] [--team <team_id>] [--json]`
 *
 * With --as-of, the user as the mirror showed it at that time, from history
 * (db/history-reader.ts): exit 3 if no user held the id then, 2 if the time
 * is before history is complete (the mirror cannot say; the message gives
 * from when it can).
 *
 * Prints the service's User object for a client_user_id, from the mirror
 * (MIRROR_DB) without touching the network; deleted users only with
 * --include-deleted. --online asks the service instead and writes what it
 * answers into the mirror (db/user-writes.ts); a 404 there is printed
 * as not found and deletes nothing, because one miss is not a full scan.
 *
 * The online answer is printed before it is stored: a sync's publish may hold
 * the mirror's write lock for tens of seconds, and the answer does not depend
 * on the store. The store then waits up to RESOLVE_WRITE_WAIT_MS for the
 * lock; if it cannot land, a warning says so on stderr and the exit is still
 * 0 (the answer is right; the next sync brings the mirror up to date anyway).
 * On a follower (SYNC_FOLLOW_LEADER), an answer that carries no leader's
 * x-mirror-* headers, or a user of another team than the follower's, is
 * neither printed nor stored (exit 1): the follower's sync would refuse it.
 *
 * Output: pretty JSON of the User, as the service sent it, on stdout; with
 * --json, one line `{"found":true,"source":"mirror"|"service","deleted_at":…,"user":{…}}`,
 * and for --online also `"warnings":[{field, problem}]`: the fields that broke
 * their rule (stored NULL in the mirror's columns, listed in field_warnings).
 * Not found: one line on stderr, and with --json also one line on stdout,
 * `{"found":false,"source":"mirror"|"service"|"history","client_user_id":…}`
 * (and `"as_of"` with --as-of), so a script reading stdout gets an answer.
 * Exit codes: 0 found, 3 not found, 2 usage or
 * configuration error, 1 anything else (no mirror file, service error).
 */
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { readConfig, SERVICE_ENV } from '../runtime/config.js';
import type { StagedRecord } from '../../db/mirrored-user.js';
import type { CheckpointMode } from '../../db/open.js';
import { openResolver } from '../replica/resolve.js';
import type { ResolveResult } from '../service/client.js';
import type { FieldWarning } from '../service/user-record.js';
import { echoId } from '../runtime/line-text.js';

const EXIT_NOT_FOUND = 3;

const Args = z.object({
  'include-deleted': z.boolean().optional(),
  online: z.boolean().optional(),
  json: z.boolean().optional(),
  team: z.guid('must be a team UUID').optional(),
  'as-of': z
    // Seconds may be left out (2026-06-01T12:00+02:00), as ISO 8601 allows.
    .union([z.iso.datetime({ offset: true }), z.iso.datetime({ offset: true, precision: -1 }), z.iso.date()], {
      error: 'must be an ISO 8601 time with its offset (2026-06-01T12:00:00Z) or a date (2026-06-01, midnight UTC)',
    })
    .transform(asOfInstant)
    .optional(),
  positionals: z.array(z.string().min(1, 'client_user_id must not be empty')).length(1, 'expects exactly one client_user_id'),
});

interface Found {
  source: 'mirror' | 'service';
  /** The record as received: what the mirror keeps in `users.raw`. */
  record: unknown;
  deletedAt: string | null;
  /** Online only: what the parser had to drop. */
  warnings?: readonly FieldWarning[];
}

export default async function resolve(argv: string[]): Promise<number> {
  const args = parseCommandArgs(
    argv,
    {
      'include-deleted': { type: 'boolean' },
      online: { type: 'boolean' },
      json: { type: 'boolean' },
      team: { type: 'string' },
      'as-of': { type: 'string' },
    },
    Args,
  );
  const [clientUserId] = args.positionals as [string];
  const asOf = args['as-of'];
  if (asOf !== undefined) {
    if (args.online === true || args['include-deleted'] === true) {
      throw new UsageError('--as-of: answers from history alone; it takes neither --online nor --include-deleted');
    }
    return await resolveAsOf(clientUserId, asOf, args.team, args.json === true);
  }
  if (args.online === true) return resolveOnline(clientUserId, args.team, args.json === true);
  const found = resolveFromMirror(clientUserId, args);
  if (found === undefined) return notFound(clientUserId, { source: 'mirror', where: 'the mirror', json: args.json === true });
  print(found, args.json === true);
  return 0;
}

/**
 * An --as-of time as the instant the mirror's history compares (UTC, `YYYY-MM-DDTHH:MM:SS.sssZ`, compared
 * as text there): a time whose UTC year is not four digits would compare wrongly (`+010000-…` sorts
 * before `2026-…`), so it is refused by name instead of answered as "before history began".
 */
function asOfInstant(text: string, ctx: z.RefinementCtx<string>): string {
  const at = new Date(text);
  const year = at.getUTCFullYear();
  if (Number.isNaN(year) || year < 0 || year > 9999) {
    ctx.addIssue({
      code: 'custom',
      message: `${text} is in year ${year} in UTC; the mirror's history answers times from 0000-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z`,
    });
    return z.NEVER;
  }
  return at.toISOString();
}

interface Miss {
  source: 'mirror' | 'service' | 'history';
  /** For the line on stderr. */
  where: string;
  json: boolean;
  asOf?: string;
}

function notFound(clientUserId: string, miss: Miss): number {
  process.stderr.write(`user-mirror resolve: ${echoId(clientUserId)} not found in ${miss.where}\n`);
  if (miss.json) {
    const line = {
      found: false,
      source: miss.source,
      client_user_id: clientUserId,
      ...(miss.asOf === undefined ? {} : { as_of: miss.asOf }),
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
  }
  return EXIT_NOT_FOUND;
}

function resolveFromMirror(clientUserId: string, args: z.output<typeof Args>): Found | undefined {
  const { MIRROR_DB } = readConfig(['MIRROR_DB']);
  const open = openResolver(MIRROR_DB);
  try {
    const entry = open.reader.lookup(clientUserId, { includeDeleted: args['include-deleted'] === true, teamId: args.team });
    return entry === undefined ? undefined : { source: 'mirror', record: entry.user, deletedAt: entry.deletedAt };
  } finally {
    open.close();
  }
}

const EXIT_BEFORE_HISTORY = 2;

async function resolveAsOf(clientUserId: string, at: string, teamId: string | undefined, json: boolean): Promise<number> {
  const { MIRROR_DB } = readConfig(['MIRROR_DB']);
  const { HistoryReader } = await import('../../db/history-reader.js');
  const open = openResolver(MIRROR_DB);
  let answer;
  try {
    answer = new HistoryReader(open.db).asOf(clientUserId, at, teamId);
  } finally {
    open.close();
  }
  if (answer.kind === 'unknown') {
    const since =
      answer.completeSince === null ? 'has not begun: no complete sync has been published yet' : `begins at ${answer.completeSince}`;
    process.stderr.write(`user-mirror resolve: cannot answer as of ${at}: the mirror's history ${since}\n`);
    return EXIT_BEFORE_HISTORY;
  }
  if (answer.kind === 'gap') {
    const { gap } = answer;
    process.stderr.write(
      `user-mirror resolve: cannot answer as of ${at}: the mirror was restored at ${gap.restoredAt} from a backup taken ${gap.from}, ` +
        `so what it showed from then ${gap.to === null ? 'until its next sync' : `until ${gap.to}`} is not known\n`,
    );
    return EXIT_BEFORE_HISTORY;
  }
  if (answer.kind === 'absent')
    return notFound(clientUserId, { source: 'history', where: `the mirror's history as of ${at}`, json, asOf: at });
  const { version, sources } = answer;
  const record: unknown = version.raw === null ? null : JSON.parse(version.raw);
  if (json) {
    const line = {
      found: true,
      source: 'history',
      as_of: at,
      user_id: version.user_id,
      valid_from: version.valid_from,
      valid_to: version.valid_to,
      sources: sources.map((c) => ({ slug: c.slug, created_on: c.created_on, connected_at: c.connected_at })),
      user: record,
    };
    process.stdout.write(`${JSON.stringify(line)}\n`);
    return 0;
  }
  process.stdout.write(`${JSON.stringify(record, null, 2)}\n`);
  process.stderr.write(
    `user-mirror resolve: note: as mirrored from ${version.valid_from} ${version.valid_to === null ? 'until now' : `to ${version.valid_to}`}\n`,
  );
  return 0;
}

async function resolveOnline(clientUserId: string, teamId: string | undefined, json: boolean): Promise<number> {
  const config = readConfig([
    ...SERVICE_ENV,
    'MIRROR_DB',
    'RESOLVE_WRITE_WAIT_MS',
    'MIRROR_CHECKPOINTS',
    'SYNC_MAX_RESOLVE_BYTES',
    'SYNC_FOLLOW_LEADER',
    'SYNC_FOLLOW_TEAM',
  ]);
  // The HTTP client (undici) and the mirror's write path are loaded here, not with the command: an offline
  // resolve needs neither. Both before the request, so the answer is stored as soon as it is printed.
  const [{ serviceClientFromConfig }, storeInMirror] = await Promise.all([import('../service/client-from-config.js'), loadStore()]);
  const client = serviceClientFromConfig(config);
  let result: ResolveResult;
  try {
    result = await client.resolveUser(clientUserId);
  } finally {
    await client.close();
  }
  if (!result.found) return notFound(clientUserId, { source: 'service', where: 'the service', json });
  const { user, rawJson, warnings } = result;
  // The team key decides the team; a --team that disagrees is a question about another directory.
  if (teamId !== undefined && user.team_id !== teamId) return notFound(clientUserId, { source: 'service', where: 'the service', json });
  // A follower stores only what its sync would (src/sync/leader-pin.ts): a leader's answer, of the follower's team.
  const untrusted = config.SYNC_FOLLOW_LEADER ? await followerRefusal(result, config.SYNC_FOLLOW_TEAM, config.MIRROR_DB) : undefined;
  if (untrusted !== undefined) {
    process.stderr.write(`user-mirror resolve: the answer is neither printed nor stored: ${untrusted}\n`);
    return 1;
  }
  print({ source: 'service', record: JSON.parse(rawJson) as unknown, deletedAt: null, warnings }, json);
  storeInMirror({ user, rawJson, warnings }, config.MIRROR_DB, config.RESOLVE_WRITE_WAIT_MS, config.MIRROR_CHECKPOINTS);
  return 0;
}

/** Why a follower must not take this answer (no leader headers, another team), or undefined. */
async function followerRefusal(result: ResolveResult, team: string | undefined, path: string): Promise<string | undefined> {
  const [{ openMirror }, { RunSources }, { LeaderPin, pinTeam }, { LeaderUntrusted }] = await Promise.all([
    import('../../db/open.js'),
    import('../../db/run-source.js'),
    import('../sync/leader-pin.js'),
    import('../service/source-freshness.js'),
  ]);
  let teams: string[] = [];
  try {
    const db = openMirror(path, { readonly: true });
    try {
      teams = new RunSources(db).activeTeams();
    } finally {
      db.close();
    }
  } catch {
    // No mirror yet: the answer's own team is the first it will hold.
  }
  const pinned = pinTeam(team, teams);
  if ('refused' in pinned) return pinned.refused;
  try {
    new LeaderPin(pinned).checkResolve("the leader's resolve answer", result);
    return undefined;
  } catch (err) {
    if (err instanceof LeaderUntrusted) return err.message;
    throw err;
  }
}

/** Stores an online answer; a mirror that stays write-locked only earns a warning. */
type StoreInMirror = (record: StagedRecord, path: string, waitMs: number, checkpoints: CheckpointMode) => void;

/** The mirror's write path (db/user-refresh.ts and what it needs), which only an online resolve loads. */
async function loadStore(): Promise<StoreInMirror> {
  const [{ openMirror }, { isBusy }, { UserRefresh }, { contentHash }] = await Promise.all([
    import('../../db/open.js'),
    import('../../db/busy-retry.js'),
    import('../../db/user-refresh.js'),
    import('../../db/user-row.js'),
  ]);
  return (record, path, waitMs, checkpoints) => {
    try {
      const db = openMirror(path, { busyTimeoutMs: waitMs, checkpoints });
      try {
        // The body as received, like a sync stores it; the fields it had to drop become field_warnings rows.
        new UserRefresh(db).refresh(record, contentHash(record.rawJson));
      } finally {
        db.close();
      }
    } catch (err) {
      if (!isBusy(err)) throw err;
      process.stderr.write(
        `user-mirror resolve: warning: the mirror was not refreshed with this answer: its write lock stayed taken ` +
          `for ${waitMs} ms (RESOLVE_WRITE_WAIT_MS; a sync is probably publishing). The next sync brings it up to date.\n`,
      );
    }
  };
}

function print(found: Found, json: boolean): void {
  if (json) {
    const { source, deletedAt, record, warnings } = found;
    process.stdout.write(`${JSON.stringify({ found: true, source, deleted_at: deletedAt, user: record, warnings })}\n`);
    return;
  }
  process.stdout.write(`${JSON.stringify(found.record, null, 2)}\n`);
  for (const w of found.warnings ?? []) {
    process.stderr.write(`user-mirror resolve: note: ${w.field} ignored: ${w.problem}\n`);
  }
  if (found.deletedAt !== null) {
    process.stderr.write(
      `user-mirror resolve: note: this user was deleted upstream (marked deleted in the mirror at ${found.deletedAt})\n`,
    );
  }
}

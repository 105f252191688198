/**
 * `user-mirror resolve <client_user_id> [--include-deleted] [--online] [--team <team_id>] [--json]`
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
 *
 * Output: pretty JSON of the User, as the service sent it, on stdout; with
 * --json, one line `{"found":true,"source":"mirror"|"service","deleted_at":…,"user":{…}}`,
 * and for --online also `"warnings":[{field, problem}]`: the fields that broke
 * their rule (stored NULL in the mirror's columns, listed in field_warnings).
 * Exit codes: 0 found, 3 not found (one line on stderr), 2 usage or
 * configuration error, 1 anything else (no mirror file, service error).
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig, SERVICE_ENV } from '../runtime/config.js';
import { serviceClientFromConfig } from '../service/client-from-config.js';
import { openMirror } from '../../db/open.js';
import { isBusy } from '../../db/busy-retry.js';
import { type StagedRecord, UserRefresh } from '../../db/user-writes.js';
import { contentHash } from '../../db/user-row.js';
import { openResolver } from '../replica/resolve.js';
import type { ResolveResult } from '../service/client.js';
import type { FieldWarning } from '../service/user-record.js';

const EXIT_NOT_FOUND = 3;

const Args = z.object({
  'include-deleted': z.boolean().optional(),
  online: z.boolean().optional(),
  json: z.boolean().optional(),
  team: z.guid('must be a team UUID').optional(),
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
    },
    Args,
  );
  const [clientUserId] = args.positionals as [string];
  if (args.online === true) return resolveOnline(clientUserId, args.team, args.json === true);
  const found = resolveFromMirror(clientUserId, args);
  if (found === undefined) return notFound(clientUserId, 'the mirror');
  print(found, args.json === true);
  return 0;
}

function notFound(clientUserId: string, where: string): number {
  process.stderr.write(`user-mirror resolve: ${JSON.stringify(clientUserId)} not found in ${where}\n`);
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

async function resolveOnline(clientUserId: string, teamId: string | undefined, json: boolean): Promise<number> {
  const config = readConfig([...SERVICE_ENV, 'MIRROR_DB', 'RESOLVE_WRITE_WAIT_MS']);
  const client = serviceClientFromConfig(config);
  let result: ResolveResult;
  try {
    result = await client.resolveUser(clientUserId);
  } finally {
    await client.close();
  }
  if (!result.found) return notFound(clientUserId, 'the service');
  const { user, rawJson, warnings } = result;
  // The team key decides the team; a --team that disagrees is a question about another directory.
  if (teamId !== undefined && user.team_id !== teamId) return notFound(clientUserId, 'the service');
  print({ source: 'service', record: JSON.parse(rawJson) as unknown, deletedAt: null, warnings }, json);
  storeInMirror({ user, rawJson, warnings }, config.MIRROR_DB, config.RESOLVE_WRITE_WAIT_MS);
  return 0;
}

/** Stores an online answer; a mirror that stays write-locked only earns a warning. */
function storeInMirror(record: StagedRecord, path: string, waitMs: number): void {
  try {
    const db = openMirror(path, { busyTimeoutMs: waitMs });
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

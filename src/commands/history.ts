/**
 * `user-mirror history <client_user_id> [--team <team_id>] [--json]`
 *
 * Every version of the user (or users, over time) that held a
 * client_user_id, and their source connections, from the mirror's history
 * (db/history-reader.ts), read only. Text: two tables for a person;
 * `--json`: one object `{client_user_id, complete_since, versions, connections}`
 * with the records embedded.
 *
 * Exit codes: 0 found, 3 the id has no version in history, 1 the mirror
 * cannot be read (or has no history yet), 2 usage or configuration error.
 */
import { z } from 'zod';
import { parseCommandArgs } from './args.js';
import { readConfig } from '../runtime/config.js';
import { HistoryReader, type SourceConnection, type UserVersion } from '../../db/history-reader.js';
import { openResolver } from '../replica/resolve.js';
import { echoId } from '../runtime/line-text.js';

const EXIT_NOT_FOUND = 3;

const Args = z.object({
  json: z.boolean().optional(),
  team: z.guid('must be a team UUID').optional(),
  positionals: z.array(z.string().min(1, 'client_user_id must not be empty')).length(1, 'expects exactly one client_user_id'),
});

export default async function history(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, { json: { type: 'boolean' }, team: { type: 'string' } }, Args);
  const [clientUserId] = args.positionals as [string];
  const { MIRROR_DB } = readConfig(['MIRROR_DB']);
  const open = openResolver(MIRROR_DB);
  let found;
  let completeSince;
  try {
    const reader = new HistoryReader(open.db);
    found = reader.of(clientUserId, args.team);
    completeSince = reader.completeSince();
  } finally {
    open.close();
  }
  if (found.versions.length === 0) {
    process.stderr.write(`user-mirror history: ${echoId(clientUserId)} has no version in the mirror's history\n`);
    return EXIT_NOT_FOUND;
  }
  if (args.json === true) {
    const versions = found.versions.map(({ raw, ...v }) => ({ ...v, user: raw === null ? null : (JSON.parse(raw) as unknown) }));
    const out = { client_user_id: clientUserId, complete_since: completeSince, versions, connections: found.connections };
    process.stdout.write(`${JSON.stringify(out)}\n`);
    return 0;
  }
  process.stdout.write(render(clientUserId, completeSince, found.versions, found.connections));
  return 0;
}

/** Two aligned tables and the line that says from when history is complete. */
export function render(
  clientUserId: string,
  completeSince: string | null,
  versions: readonly UserVersion[],
  connections: readonly SourceConnection[],
): string {
  const since = completeSince === null ? 'not begun yet (no complete sync published)' : completeSince;
  const v = versions.map((x) => [
    x.valid_from,
    x.valid_to ?? 'now',
    x.user_id,
    x.client_user_id,
    x.end_cause === null ? '' : x.ended_in_deletion === 1 ? `deleted (${x.end_cause})` : x.end_cause,
    x.backfilled === 1 ? 'backfilled' : '',
  ]);
  const c = connections.map((x) => [
    x.slug,
    x.connected_at,
    x.disconnected_at ?? 'now',
    x.created_on ?? '',
    x.ended_by ?? '',
    x.user_id,
    x.backfilled === 1 ? 'backfilled' : '',
  ]);
  return [
    `history of ${JSON.stringify(clientUserId)}; complete since ${since}`,
    '',
    ...table(['FROM', 'TO', 'USER_ID', 'CLIENT_USER_ID', 'ENDED', ''], v),
    '',
    ...(c.length === 0
      ? ['no source connections']
      : table(['SOURCE', 'CONNECTED', 'DISCONNECTED', 'SERVICE_CREATED_ON', 'ENDED_BY', 'USER_ID', ''], c)),
    '',
  ].join('\n');
}

function table(head: readonly string[], rows: ReadonlyArray<readonly string[]>): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: readonly string[]) =>
    r
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(head), ...rows.map(line)];
}

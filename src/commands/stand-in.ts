/**
 * `user-mirror stand-in`: runs the local stand-in service until SIGINT or
 * SIGTERM, and prints where it listens and which keys it accepts — the
 * environment's keys when set, so a client configured from the same
 * environment just works, and otherwise keys derived from --seed, so a
 * restart does not send a running daemon into 401s. The banner says which.
 * Printing keys is fine here: they belong to a local fake, not to any real
 * account.
 */
import { z } from 'zod';
import { parseCommandArgs, UsageError } from './args.js';
import { isGiven, readConfig, type Config } from '../runtime/config.js';
import {
  isoDate,
  NO_FAULTS,
  UsersFileError,
  startStandIn,
  type FaultPlan,
  type KeyOrigin,
  type RequestLogEntry,
  type StandIn,
} from '../stand-in/index.js';
import { untilStopSignal } from '../runtime/lifecycle.js';

const USAGE = `usage: user-mirror stand-in [options]

  --port P                 listen port, 0 for any free one (default 8787)
  --host H                 listen address (default 127.0.0.1)
  --users N                generated users (default 1000; 0 with --users-file)
  --seed S                 seed of users, orgs, random faults and, unless SERVICE_API_KEY /
                           MANAGEMENT_KEY are set, of the keys: stable across restarts (default 1)
  --today YYYY-MM-DD       the day generated dates end at (default: the current UTC day);
                           created_on spreads over the five years before it
  --users-file F           JSON array of user records (or {"users": [...]}) served as-is
  --legacy-records R       share 0..1 of generated users in older or odd shapes: no created_on,
                           source-only or bare connected sources, no fallback_time_zone,
                           placeholder ingestion_*, empty slugs, offset-less created_on
                           (default 0: every user has the shape the live service sends today)
  --orgs N                 seeded organizations (default 3)
  --members-per-org N      seeded members per organization (default 20)
  --verbose                one line per request on stderr
  --no-compress            answer plain even to clients that ask for gzip, br or zstd
                           (default: compressed when asked, as the service's front door does)

fault injection (rates are 0..1 per authenticated request):
  --latency-ms MS          fixed added latency
  --bandwidth-mbps M       one link of M Mbit/s shared by every answer in flight (0: unlimited)
  --latency-min-ms MS      plus a random latency from min..max
  --latency-max-ms MS
  --rate-429 R             429 with Retry-After
  --rate-500 R             500 (plain-text body)
  --rate-503 R             503 with Retry-After
  --retry-after V          seconds, an HTTP date, or "none" (default 1)
  --reset-rate R           drop the connection without an answer
  --truncate-rate R        answer, but cut the body short
  --slow-body-rate R       send the body in delayed chunks
  --slow-chunk-bytes N     (default 1024)
  --slow-chunk-delay-ms MS (default 50)
  --churn-per-page K       after each list page, add K users and delete K
  --churn-add-per-page K   ... or set the two sides apart
  --churn-delete-per-page K
  --churn-update-per-page K after each list page, change K random live users' records
                           (a new fallback_time_zone, or a connected source added or removed)
  --repeat-page N:M        the list page at offset N carries the users of offset M (its envelope
                           still says N), as a service without a sort order may
  --repeat-page-times K    ... only the first K times it is asked for (default 0: every time)
  --reorder-rate R         chance per list request that the listing takes a new order, kept
                           until the next (1: a new order on every request)
  --fault-path-prefix P    inject only on paths starting with P (default /)

control routes (no key; loopback clients only; never faulted), see docs/stand-in.md:
  POST /_stand-in/users                         add a user ({"count": N} for more)
  POST /_stand-in/users/{user_id}/update        change it ({"change": "connected_sources"}
                                                for a source instead of the time zone)
  POST /_stand-in/users/{user_id}/delete        delete it
  POST /_stand-in/users/{user_id}/restore       list a deleted user again
`;

const str = { type: 'string' } as const;
const OPTIONS = {
  port: str,
  host: str,
  users: str,
  seed: str,
  today: str,
  'users-file': str,
  'legacy-records': str,
  orgs: str,
  'members-per-org': str,
  verbose: { type: 'boolean' },
  'no-compress': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  'latency-ms': str,
  'bandwidth-mbps': str,
  'latency-min-ms': str,
  'latency-max-ms': str,
  'rate-429': str,
  'rate-500': str,
  'rate-503': str,
  'retry-after': str,
  'reset-rate': str,
  'truncate-rate': str,
  'slow-body-rate': str,
  'slow-chunk-bytes': str,
  'slow-chunk-delay-ms': str,
  'churn-per-page': str,
  'churn-add-per-page': str,
  'churn-delete-per-page': str,
  'churn-update-per-page': str,
  'repeat-page': str,
  'repeat-page-times': str,
  'reorder-rate': str,
  'fault-path-prefix': str,
} as const;

const count = (max: number) => z.coerce.number().int().min(0).max(max);
const rate = z.coerce.number().min(0).max(1).optional();
const millis = count(600_000).optional();
const retryAfter = z
  .string()
  .refine((v) => v === 'none' || /^\d+$/.test(v) || !Number.isNaN(Date.parse(v)), 'must be seconds, an HTTP date or "none"')
  .transform((v) => (v === 'none' ? null : /^\d+$/.test(v) ? Number(v) : v))
  .optional();

/** `--legacy-records`, shared with the demo. */
export const LegacyRecordsArg = z.coerce.number().min(0, 'must be a share from 0 to 1').max(1, 'must be a share from 0 to 1').default(0);

const ArgsSchema = z.object({
  positionals: z.array(z.string()).max(0, 'takes no arguments'),
  port: count(65_535).default(8787),
  host: z.string().min(1).default('127.0.0.1'),
  users: count(100_000_000).optional(),
  seed: z.coerce.number().int().refine(Number.isSafeInteger, 'must be a safe integer').default(1),
  today: z.iso
    .date('must be a date YYYY-MM-DD')
    .transform((d) => Date.parse(`${d}T00:00:00Z`))
    .optional(),
  'users-file': z.string().min(1).optional(),
  'legacy-records': LegacyRecordsArg,
  orgs: count(10_000).default(3),
  'members-per-org': count(100_000).default(20),
  verbose: z.boolean().default(false),
  'no-compress': z.boolean().default(false),
  help: z.boolean().default(false),
  'latency-ms': millis,
  'bandwidth-mbps': z.coerce.number().min(0).max(100_000).optional(),
  'latency-min-ms': millis,
  'latency-max-ms': millis,
  'rate-429': rate,
  'rate-500': rate,
  'rate-503': rate,
  'retry-after': retryAfter,
  'reset-rate': rate,
  'truncate-rate': rate,
  'slow-body-rate': rate,
  'slow-chunk-bytes': z.coerce.number().int().min(1).optional(),
  'slow-chunk-delay-ms': millis,
  'churn-per-page': count(100_000).optional(),
  'churn-add-per-page': count(100_000).optional(),
  'churn-delete-per-page': count(100_000).optional(),
  'churn-update-per-page': count(100_000).optional(),
  'repeat-page': z
    .string()
    .regex(/^\d+:\d+$/, 'must be N:M, two offsets (the page at offset N repeats offset M)')
    .transform((v) => v.split(':').map(Number) as [number, number])
    .optional(),
  'repeat-page-times': count(1_000_000).optional(),
  'reorder-rate': rate,
  'fault-path-prefix': z.string().startsWith('/', 'must start with /').optional(),
});
type Args = z.output<typeof ArgsSchema>;

export default async function standIn(argv: string[]): Promise<number> {
  const args = parseCommandArgs(argv, OPTIONS, ArgsSchema);
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const standIn = await start(args);
  process.stdout.write(banner(standIn, args));
  const signal = await untilStopSignal();
  await standIn.close();
  process.stderr.write(`user-mirror stand-in: stopped (${signal})\n`);
  return 0;
}

async function start(args: Args): Promise<StandIn> {
  try {
    return await startStandIn({
      port: args.port,
      host: args.host,
      users: args.users,
      seed: args.seed,
      today: args.today,
      usersFile: args['users-file'],
      legacyRecords: args['legacy-records'],
      orgs: args.orgs,
      membersPerOrg: args['members-per-org'],
      faults: faultPlan(args),
      ...environmentKeys(),
      onRequest: args.verbose ? logRequest : undefined,
      compress: !args['no-compress'],
    });
  } catch (err) {
    // A fault plan that does not add up, or an unreadable users file, is a usage problem, not a crash.
    if (err instanceof RangeError || err instanceof UsersFileError) throw new UsageError(err.message);
    throw err;
  }
}

/** Keys from the environment when set; unset ones are derived from --seed by startStandIn. */
function environmentKeys(): { apiKey?: string; managementKey?: string; apiKeyHeader: string } {
  // One read, so a bad header and a bad key are reported together; a key is read only when given.
  const given = (['SERVICE_API_KEY', 'MANAGEMENT_KEY'] as const).filter((name) => isGiven(name));
  const config: Config<'SERVICE_API_KEY_HEADER'> & Partial<Config<(typeof given)[number]>> = readConfig([
    'SERVICE_API_KEY_HEADER',
    ...given,
  ]);
  return { apiKey: config.SERVICE_API_KEY, managementKey: config.MANAGEMENT_KEY, apiKeyHeader: config.SERVICE_API_KEY_HEADER };
}

function faultPlan(args: Args): Partial<FaultPlan> {
  const plan: Partial<FaultPlan> = {
    latencyMs: args['latency-ms'],
    bandwidthMbps: args['bandwidth-mbps'],
    latencyMinMs: args['latency-min-ms'],
    latencyMaxMs: args['latency-max-ms'],
    rate429: args['rate-429'],
    rate500: args['rate-500'],
    rate503: args['rate-503'],
    retryAfter: args['retry-after'],
    resetRate: args['reset-rate'],
    truncateRate: args['truncate-rate'],
    slowBodyRate: args['slow-body-rate'],
    slowChunkBytes: args['slow-chunk-bytes'],
    slowChunkDelayMs: args['slow-chunk-delay-ms'],
    churnAddPerPage: args['churn-add-per-page'] ?? args['churn-per-page'],
    churnDeletePerPage: args['churn-delete-per-page'] ?? args['churn-per-page'],
    churnUpdatePerPage: args['churn-update-per-page'],
    repeatPageAt: args['repeat-page']?.[0],
    repeatPageOf: args['repeat-page']?.[1],
    repeatPageTimes: args['repeat-page-times'],
    reorderRate: args['reorder-rate'],
    pathPrefix: args['fault-path-prefix'],
  };
  return Object.fromEntries(Object.entries(plan).filter(([, v]) => v !== undefined));
}

function banner(s: StandIn, args: Args): string {
  const faults = Object.entries(s.faults.plan).filter(([k, v]) => NO_FAULTS[k as keyof FaultPlan] !== v);
  const source = args['users-file'] === undefined ? `seed ${args.seed}` : `${args['users-file']} + generated, seed ${args.seed}`;
  return [
    `user-mirror stand-in listening on ${s.baseUrl}`,
    `  directory: ${s.directory.size} users (${source}), team ${s.directory.teamId}`,
    `  legacy records: ${describeLegacyShare(args['legacy-records'])} of generated users`,
    `  dates: created_on up to ${isoDate(s.directory.today)} (${args.today === undefined ? 'today, UTC; --today to reproduce another day' : '--today'})`,
    `  orgs: ${s.members.orgIds().length}, members: ${s.members.list().length}`,
    `  team routes:      GET /v2/user, GET /v2/user/resolve/{client_user_id}   key header: ${s.apiKeyHeader}`,
    `  management route: DELETE /v1/org/{org_id}/member/{member_id}   key header: X-Management-Key`,
    `  control routes:   POST /_stand-in/users, POST /_stand-in/users/{user_id}/update|delete|restore   no key, loopback only`,
    `  keys: SERVICE_API_KEY ${keyOrigin(s.keyOrigins.apiKey, args.seed)}`,
    `        MANAGEMENT_KEY ${keyOrigin(s.keyOrigins.managementKey, args.seed)}`,
    `  compression: ${args['no-compress'] ? 'off (--no-compress)' : 'gzip, br or zstd when the client asks (accept-encoding); --no-compress for plain'}`,
    `  faults: ${faults.length === 0 ? 'none' : faults.map(([k, v]) => `${k}=${String(v)}`).join(' ')}`,
    '',
    '# paste into the client shell:',
    `export SERVICE_BASE_URL=${s.baseUrl}`,
    `export SERVICE_API_KEY=${s.apiKey}`,
    `export SERVICE_API_KEY_HEADER=${s.apiKeyHeader}`,
    `export MANAGEMENT_URL=${s.managementUrl}`,
    `export MANAGEMENT_KEY=${s.managementKey}`,
    ...memberExamples(s),
    '',
  ].join('\n');
}

/** Given keys come from the environment: the CLI passes nothing else. */
function keyOrigin(origin: KeyOrigin, seed: number): string {
  return origin === 'given' ? 'from the environment' : `derived from --seed ${seed}: stable across restarts`;
}

/** A few members to try a removal with, so nobody has to borrow ids from elsewhere. */
function memberExamples(s: StandIn): string[] {
  const some = s.members.list().slice(0, 3);
  if (some.length === 0) return [];
  return [
    '',
    '# members to try a removal with (user-mirror remove-member <org_id> <member_id> --wait):',
    ...some.map((m) => `#   ${m.orgId} ${m.memberId}`),
  ];
}

/** `0%`, `12.5%`: how the banner and the demo state the share. */
export function describeLegacyShare(share: number): string {
  return `${Number((share * 100).toFixed(2))}%`;
}

function logRequest(entry: RequestLogEntry): void {
  const query = entry.query === '' ? '' : `?${entry.query}`;
  const fault = entry.fault === undefined ? '' : ` [${entry.fault}]`;
  process.stderr.write(`${entry.method} ${entry.path}${query} ${entry.status}${fault} ${entry.durationMs.toFixed(1)}ms\n`);
}

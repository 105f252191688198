/**
 * The local stand-in for the user-directory service (in the spirit of
 * stripe-mock): seeded users, org members, the upstream's auth and 422
 * shapes, injectable faults, and control routes that change chosen users at
 * run time (./control.ts). Tests start it in-process; the CLI's
 * `stand-in` command runs it as a daemon.
 */
import { listen } from '../runtime/lifecycle.js';
import { Churn } from './churn.js';
import { Directory } from './directory.js';
import { resolveKeys, type KeyOrigins } from './keys.js';
import { Faults, type FaultPlan } from './faults.js';
import { Members } from './members.js';
import { RequestLog, RouteCounts, type RequestLogEntry } from './request-log.js';
import { createStandInServer } from './server.js';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { Link } from './link.js';
import type { JsonRecord } from './revision.js';

export { isoDate } from './catalog.js';
export { derivedKey, type KeyOrigin } from './keys.js';
export { NO_FAULTS, type FaultPlan } from './faults.js';
export { type RequestLogEntry } from './request-log.js';
export { generateUser, startOfUtcDay, userKeys } from './user-generator.js';
export type { JsonRecord } from './revision.js';

export interface StandInOptions {
  /** 0 (the default) picks a free port. */
  port?: number;
  host?: string;
  /** Generated users; default 1000, or 0 when records come from a file. */
  users?: number;
  seed?: number;
  /** JSON file of user records served as-is, before any generated ones. */
  usersFile?: string;
  /** The same, in-process. */
  records?: readonly JsonRecord[];
  /**
   * Share (0..1) of generated users served in an older or odd shape (no
   * `created_on`, source-only connected sources, placeholder values...).
   * Default 0: every generated user has the shape the live service sends today.
   */
  legacyRecords?: number;
  /**
   * Any time of the day generated dates end at (created_on and the rest
   * spread over the five years before its 00:00 UTC). Default: now, so
   * records are dated up to today; pass a day to reproduce another run's records.
   */
  today?: Date | number;
  /** Default: an `sk_…` key derived from the seed (the same on every start with that seed). */
  apiKey?: string;
  /** Default `x-service-api-key`; matched case-insensitively. */
  apiKeyHeader?: string;
  /** Default: an `mg_…` key derived from the seed. */
  managementKey?: string;
  orgs?: number;
  membersPerOrg?: number;
  faults?: Partial<FaultPlan>;
  requestLogSize?: number;
  /** Called after each request (the CLI's --verbose). */
  onRequest?: (entry: RequestLogEntry) => void;
  /** Compress answers for clients that ask (`accept-encoding`), as the service's front door does; default true. */
  compress?: boolean;
}

export interface StandIn {
  baseUrl: string;
  /** Same server as baseUrl: the management route lives under /v1. */
  managementUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  managementKey: string;
  /** Which keys were given and which derived from the seed. */
  keyOrigins: KeyOrigins;
  port: number;
  directory: Directory;
  members: Members;
  faults: Faults;
  requests: RequestLog;
  counts: RouteCounts;
  close(): Promise<void>;
}

export async function startStandIn(options: StandInOptions = {}): Promise<StandIn> {
  const seed = options.seed ?? 1;
  const { apiKey, apiKeyHeader, managementKey } = options;
  const { keys, origins } = resolveKeys({ seed, apiKey, apiKeyHeader, managementKey });
  const fileRecords = options.usersFile === undefined ? options.records : await loadUsersFile(options.usersFile);
  const users = options.users ?? (fileRecords ? 0 : 1000);
  const directory = new Directory({ seed, users, fileRecords, legacyRecords: options.legacyRecords, today: options.today });
  const members = new Members({ seed, orgs: options.orgs ?? 3, membersPerOrg: options.membersPerOrg ?? 20 });
  const faults = new Faults(seed, options.faults);
  const requests = new RequestLog(options.requestLogSize);
  const counts = new RouteCounts();
  const deps = {
    directory,
    members,
    faults,
    keys,
    requests,
    counts,
    churn: new Churn(seed),
    link: new Link(),
    onRequest: options.onRequest,
    compress: options.compress,
  };
  const { server, shutdown } = createStandInServer(deps);
  const port = await listen(server, options.port ?? 0, options.host ?? '127.0.0.1');
  const baseUrl = `http://${urlHost(options.host ?? '127.0.0.1')}:${port}`;
  return {
    baseUrl,
    managementUrl: baseUrl,
    ...keys,
    keyOrigins: origins,
    port,
    directory,
    members,
    faults,
    requests,
    counts,
    close: shutdown,
  };
}

function urlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * `--users-file`: records a test wants served verbatim, including malformed
 * ones (that is often the point), so only the outer shape is checked.
 */
const RecordList = z.array(z.record(z.string(), z.unknown()));
const UsersFileSchema = z.union([RecordList, z.object({ users: RecordList })]);

export class UsersFileError extends Error {
  override name = 'UsersFileError';
}

async function loadUsersFile(path: string): Promise<JsonRecord[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsersFileError(`cannot read users file ${path}: ${(err as Error).message}`);
  }
  return parseUsersFile(text, path);
}

function parseUsersFile(text: string, name = 'users file'): JsonRecord[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UsersFileError(`${name} is not JSON: ${(err as Error).message}`);
  }
  const parsed = UsersFileSchema.safeParse(json);
  if (!parsed.success) throw new UsersFileError(`${name} must hold an array of user objects or {"users": [...]}`);
  return Array.isArray(parsed.data) ? parsed.data : parsed.data.users;
}

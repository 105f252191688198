/**
 * SINKS_FILE: the sinks, one JSON file validated with zod (docs/sinks.md).
 * Every problem is reported at once, each named by the sink and the field
 * (`sinks[1] "audit-bus".redis.password: …`), never with a value.
 *
 * Secrets come only by reference: `{ "file": "/path" }` or
 * `{ "credential": "NAME" }` (a systemd credential,
 * `$CREDENTIALS_DIRECTORY/NAME`); a secret written into the file by value is
 * refused, as a password inside a URL is. Files are read once, at start.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { CHANGE_EVENT_TYPES } from '../../db/change-event.js';
import { ConfigError } from '../runtime/config.js';
import { hostPortList, pemFile, type HostPort } from '../runtime/config-schemas.js';
import { formatPath } from '../runtime/zod-issues.js';
import { isLoopbackHost, TLS_PROXY_SETTING } from '../runtime/clear-text.js';
import type { RedisEndpoint, RedisTls } from '../../jobs/redis-connection.js';
import { compileFieldPolicy, FieldPolicySchema, type FieldPolicy } from './field-policy.js';
import type { SinkFilter, SinkKind } from './contract.js';

const secretRef = z.union(
  [z.strictObject({ file: z.string().min(1) }), z.strictObject({ credential: z.string().regex(/^[A-Za-z0-9_.-]+$/) })],
  {
    error: 'must be { "file": "/path" } or { "credential": "NAME" }: a secret is never written into the sinks file',
  },
);
type SecretRef = z.output<typeof secretRef>;

const tlsFiles = z.strictObject({
  ca_file: z.string().min(1).optional(),
  cert_file: z.string().min(1).optional(),
  key_file: z.string().min(1).optional(),
  servername: z
    .string()
    .regex(/^[A-Za-z0-9*.-]+$/, 'must be a host name')
    .optional(),
});

const common = {
  name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be 1-64 of a-z, 0-9, _ and -, starting with a letter or digit'),
  filter: z
    .strictObject({
      types: z.array(z.enum(CHANGE_EVENT_TYPES)).min(1).optional(),
      teams: z.array(z.string().min(1)).min(1).optional(),
    })
    .optional(),
  field_policy: FieldPolicySchema.optional(),
};

const hostPorts = z
  .array(z.string())
  .min(1)
  .transform((list, ctx) => {
    const parsed = hostPortList.safeParse(list.join(','));
    if (!parsed.success) {
      ctx.addIssue({ code: 'custom', message: 'must be a list of "host:port"' });
      return z.NEVER;
    }
    return parsed.data;
  });

const redisStream = z.strictObject({
  ...common,
  kind: z.literal('redis_stream'),
  redis: z
    .strictObject({
      url: z
        .url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' })
        .refine((u) => new URL(u).password === '', 'must not carry a password: give it as "password": { "file": … }')
        .optional(),
      cluster_nodes: hostPorts.optional(),
      sentinels: hostPorts.optional(),
      sentinel_name: z
        .string()
        .regex(/^[A-Za-z0-9_.-]+$/)
        .optional(),
      username: z
        .string()
        .regex(/^[\x21-\x7e]+$/)
        .optional(),
      password: secretRef.optional(),
      sentinel_password: secretRef.optional(),
      tls: tlsFiles.optional(),
    })
    .superRefine((r, ctx) => {
      const modes = [r.url, r.cluster_nodes, r.sentinels].filter((m) => m !== undefined).length;
      if (modes !== 1) ctx.addIssue({ code: 'custom', message: 'needs exactly one of url, cluster_nodes, sentinels' });
      if ((r.sentinels === undefined) !== (r.sentinel_name === undefined))
        ctx.addIssue({ code: 'custom', path: ['sentinel_name'], message: 'goes with sentinels, and sentinels with it' });
    }),
  /** On a Cluster, a hash tag (`{user-mirror}:changes`) places the stream; one key, so any slot works. */
  stream: z.string().min(1).max(512),
  retention: z
    .union([z.strictObject({ maxlen: z.number().int().positive() }), z.strictObject({ minid_behind: z.number().int().positive() })], {
      error: 'must be { "maxlen": n } or { "minid_behind": n }',
    })
    .optional(),
  /** Accept a Redis that can lose the stream (no AOF, or eviction): the same consent as ALLOW_VOLATILE_REDIS. */
  allow_volatile: z.boolean().default(false),
});

const token = /^[A-Za-z0-9_-]+$/;
const jetstream = z.strictObject({
  ...common,
  kind: z.literal('jetstream'),
  servers: z.array(z.string().regex(/^(nats|tls):\/\/[^/@\s]+$/, 'must be nats://host:port or tls://host:port, no credentials')).min(1),
  stream: z.string().regex(token, 'must be letters, digits, _ and -'),
  subject_prefix: z
    .string()
    .refine((s) => s.split('.').every((t) => token.test(t)), 'must be dot-separated tokens of letters, digits, _ and -'),
  user: z.string().min(1).optional(),
  password: secretRef.optional(),
  token: secretRef.optional(),
  creds: secretRef.optional(),
  tls: tlsFiles.optional(),
  /** How long JetStream remembers a Nats-Msg-Id (seconds); the expected-last-id check covers any gap beyond it. */
  duplicate_window_s: z.number().int().positive().max(86_400).default(120),
  replicas: z.number().int().min(1).max(5).default(1),
  max_age_days: z.number().positive().optional(),
});

/**
 * A webhook endpoint: today's Standard Webhooks delivery (jobs/WEBHOOKS.md), one BullMQ queue per sink.
 * The URL carries no credentials (a token goes in the query string, or the receiver checks the signature);
 * the signing secret comes by reference, `whsec_` + base64, as WEBHOOK_SECRET.
 */
const webhook = z.strictObject({
  ...common,
  kind: z.literal('webhook'),
  webhook: z.strictObject({
    url: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).refine((u) => {
      const parsed = new URL(u);
      return parsed.username === '' && parsed.password === '';
    }, 'must not carry credentials (user:password@): the receiver checks the signature'),
    secret: secretRef,
    tls: tlsFiles.optional(),
  }),
});

/**
 * A PostgreSQL destination (src/sinks/postgres): the whole mirror, its
 * history and its position, in one schema per mirror. The connection
 * string holds the writer's password, so it comes only by reference. It
 * takes no `filter`: it is a replica of the mirror, which a filtered feed
 * would silently make wrong (a user updated out of the filter stays stale);
 * the field policy is what keeps fields out of it.
 */
const postgres = z.strictObject({
  name: common.name,
  field_policy: common.field_policy,
  filter: z
    .unknown()
    .optional()
    .refine(
      (f) => f === undefined,
      'a postgres sink replicates the whole mirror and takes no filter: leave fields out with "field_policy", or give the readers a view',
    ),
  kind: z.literal('postgres'),
  /** A file or credential holding `postgres://writer:…@host:port/db` (its text is never shown). */
  connection: secretRef,
  tls: tlsFiles
    .omit({ servername: true })
    .refine((t) => (t.cert_file === undefined) === (t.key_file === undefined), 'cert_file and key_file go together')
    .optional(),
  /** The PostgreSQL schema of this mirror: one per mirror. */
  schema: z
    .string()
    .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case identifier of at most 63 characters')
    .default('user_mirror'),
  /** Feed events applied per transaction. */
  batch_events: z.number().int().min(1).max(100_000).default(1_000),
});

const SinkSchema = z.discriminatedUnion('kind', [redisStream, jetstream, webhook, postgres], {
  error: 'kind must be "redis_stream", "jetstream", "webhook" or "postgres"',
});

const SinksFileSchema = z.strictObject({ sinks: z.array(SinkSchema) }).superRefine((file, ctx) => {
  const seen = new Set<string>();
  file.sinks.forEach((s, i) => {
    if (seen.has(s.name)) ctx.addIssue({ code: 'custom', path: ['sinks', i, 'name'], message: `"${s.name}" names two sinks` });
    seen.add(s.name);
  });
});

interface TlsMaterial {
  ca?: string;
  cert?: string;
  key?: string;
  servername?: string;
}

interface SinkBase {
  name: string;
  kind: SinkKind;
  filter: SinkFilter;
  policy: FieldPolicy;
}
export interface RedisStreamSink extends SinkBase {
  kind: 'redis_stream';
  endpoint: RedisEndpoint;
  stream: string;
  retention: { maxlen: number } | { minidBehind: number } | undefined;
  allowVolatile: boolean;
}
export interface JetStreamSink extends SinkBase {
  kind: 'jetstream';
  servers: string[];
  stream: string;
  subjectPrefix: string;
  auth: { user?: string; pass?: string; token?: string; creds?: string };
  tls: TlsMaterial | undefined;
  duplicateWindowMs: number;
  replicas: number;
  maxAgeMs: number | undefined;
}
export interface WebhookSink extends SinkBase {
  kind: 'webhook';
  /** As configured (a query string may carry the receiver's routing); logs show only the canonical URL. */
  url: string;
  /** `whsec_…`, read from its file or credential. */
  secret: string;
  tls: TlsMaterial | undefined;
}
export interface PostgresSink extends SinkBase {
  kind: 'postgres';
  /** The connection string (with the writer's password): never logged; `where` says host, port, database and schema. */
  connectionString: string;
  tls: TlsMaterial | undefined;
  schema: string;
  batchEvents: number;
}
export type SinkSettings = RedisStreamSink | JetStreamSink | WebhookSink | PostgresSink;

/**
 * The sinks of SINKS_FILE (none when it is unset); a ConfigError names every problem in it.
 * TLS_BY_PROXY (src/runtime/clear-text.ts) lets a destination beyond loopback be reached without TLS.
 */
export function sinksOf(
  config: { SINKS_FILE: string | undefined; TLS_BY_PROXY?: boolean | undefined },
  env: NodeJS.ProcessEnv = process.env,
): SinkSettings[] {
  return config.SINKS_FILE === undefined ? [] : readSinksFile(config.SINKS_FILE, env, { tlsByProxy: config.TLS_BY_PROXY === true });
}

/** Whether a sink may reach a destination beyond loopback without TLS (TLS_BY_PROXY); unset: it may not. */
export interface SinkTransportOptions {
  tlsByProxy?: boolean;
}

/** Reads and checks SINKS_FILE: the sinks, or one ConfigError with every problem. */
function readSinksFile(path: string, env: NodeJS.ProcessEnv = process.env, transport: SinkTransportOptions = {}): SinkSettings[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`SINKS_FILE ${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`]);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError([`SINKS_FILE ${path}: is not JSON (${(err as Error).message})`]);
  }
  return parseSinks(json, env, `SINKS_FILE ${path}`, transport);
}

/** Validates a parsed sinks file and reads what it references; every problem at once. */
export function parseSinks(
  json: unknown,
  env: NodeJS.ProcessEnv,
  label = 'SINKS_FILE',
  transport: SinkTransportOptions = {},
): SinkSettings[] {
  const parsed = SinksFileSchema.safeParse(json);
  if (!parsed.success) throw new ConfigError(parsed.error.issues.map((i) => `${label}: ${namedPath(json, i.path)}: ${i.message}`));
  const problems: string[] = [];
  const out: SinkSettings[] = [];
  parsed.data.sinks.forEach((s, i) => {
    const at = `${label}: sinks[${i}] "${s.name}"`;
    const secret = (field: string, ref: SecretRef | undefined): string | undefined => {
      if (ref === undefined) return undefined;
      const r = readSecret(ref, env);
      if (!r.ok) problems.push(`${at}.${field}: ${r.problem}`);
      return r.ok ? r.value : undefined;
    };
    const tls = (t: z.output<typeof tlsFiles> | undefined, field = 'tls'): TlsMaterial | undefined => {
      if (t === undefined) return undefined;
      const out: TlsMaterial = {};
      for (const [name, holding, key] of [
        ['ca_file', 'CERTIFICATE', 'ca'],
        ['cert_file', 'CERTIFICATE', 'cert'],
      ] as const) {
        const p = t[name];
        if (p === undefined) continue;
        const r = pemFile(holding).safeParse(p);
        if (r.success) out[key] = r.data;
        else problems.push(`${at}.${field}.${name}: ${r.error.issues[0]?.message ?? 'is invalid'}`);
      }
      if (t.key_file !== undefined) {
        const key = secret(`${field}.key_file`, { file: t.key_file });
        if (key !== undefined && !/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key))
          problems.push(`${at}.${field}.key_file: must be a PEM private key`);
        else if (key !== undefined) out.key = key;
      }
      if (t.servername !== undefined) out.servername = t.servername;
      return out;
    };
    let policy: FieldPolicy | undefined;
    try {
      policy = compileFieldPolicy(s.field_policy, (file) => {
        try {
          return readFileSync(file);
        } catch (err) {
          throw new Error(`hmac_key_file ${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { cause: err });
        }
      });
    } catch (err) {
      problems.push(`${at}.field_policy: ${(err as Error).message}`);
    }
    if (transport.tlsByProxy !== true) for (const [field, problem] of clearTextProblems(s)) problems.push(`${at}.${field}: ${problem}`);
    const filter: SinkFilter = s.kind === 'postgres' ? {} : { types: s.filter?.types, teams: s.filter?.teams };
    const base = { name: s.name, filter };
    if (s.kind === 'redis_stream') {
      const password = secret('redis.password', s.redis.password);
      const sentinelPassword = secret('redis.sentinel_password', s.redis.sentinel_password);
      const material = tls(s.redis.tls);
      const endpoint = redisEndpoint(s.redis, password, sentinelPassword, material);
      const retention =
        s.retention === undefined
          ? undefined
          : 'maxlen' in s.retention
            ? { maxlen: s.retention.maxlen }
            : { minidBehind: s.retention.minid_behind };
      if (policy !== undefined)
        out.push({ ...base, kind: 'redis_stream', policy, endpoint, stream: s.stream, retention, allowVolatile: s.allow_volatile });
    } else if (s.kind === 'webhook') {
      const key = secret('webhook.secret', s.webhook.secret);
      if (key !== undefined && !WEBHOOK_SECRET_SHAPE.test(key))
        problems.push(`${at}.webhook.secret: must be whsec_ followed by base64 (make one with 'user-mirror webhooks new-secret')`);
      const material = tls(s.webhook.tls, 'webhook.tls');
      if (policy !== undefined && key !== undefined)
        out.push({ ...base, kind: 'webhook', policy, url: s.webhook.url, secret: key, tls: material });
    } else if (s.kind === 'postgres') {
      const connectionString = secret('connection', s.connection);
      if (connectionString !== undefined && !/^postgres(ql)?:\/\//.test(connectionString))
        problems.push(`${at}.connection: must hold a postgres:// connection string (its text is not shown)`);
      else if (connectionString !== undefined && s.tls === undefined && transport.tlsByProxy !== true) {
        const host = postgresHost(connectionString);
        if (host !== undefined && !isLoopbackHost(host) && !/[?&]sslmode=(require|verify-ca|verify-full)\b/.test(connectionString))
          problems.push(
            `${at}.connection: ${host} is beyond this host and would get rows in clear; give this sink "tls" (or sslmode=verify-full), or ${TLS_PROXY_SETTING}=1 when a TLS proxy carries it`,
          );
      }
      const material = tls(s.tls);
      if (policy !== undefined && connectionString !== undefined)
        out.push({
          ...base,
          kind: 'postgres',
          policy,
          connectionString,
          tls: material,
          schema: s.schema,
          batchEvents: s.batch_events,
        });
    } else {
      const auth: JetStreamSink['auth'] = {};
      if (s.user !== undefined) auth.user = s.user;
      const pass = secret('password', s.password);
      if (pass !== undefined) auth.pass = pass;
      const tok = secret('token', s.token);
      if (tok !== undefined) auth.token = tok;
      const creds = secret('creds', s.creds);
      if (creds !== undefined) auth.creds = creds;
      const material = tls(s.tls);
      if (policy !== undefined)
        out.push({
          ...base,
          kind: 'jetstream',
          policy,
          servers: s.servers,
          stream: s.stream,
          subjectPrefix: s.subject_prefix,
          auth,
          tls: material,
          duplicateWindowMs: s.duplicate_window_s * 1000,
          replicas: s.replicas,
          maxAgeMs: s.max_age_days === undefined ? undefined : s.max_age_days * 86_400_000,
        });
    }
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return out;
}

/**
 * Where a sink would carry events (health data) or a password in clear beyond this host: a
 * `redis://` URL, Cluster nodes or Sentinels without `tls`, or a `nats://` server without `tls`.
 */
function clearTextProblems(s: z.output<typeof SinksFileSchema>['sinks'][number]): [string, string][] {
  const out: [string, string][] = [];
  const beyond = (host: string, field: string) => {
    if (!isLoopbackHost(host))
      out.push([
        field,
        `${host} is beyond this host and would get events in clear; give this sink "tls", or ${TLS_PROXY_SETTING}=1 when a TLS proxy carries it`,
      ]);
  };
  if (s.kind === 'redis_stream') {
    const r = s.redis;
    if (r.url?.startsWith('redis:') === true) beyond(new URL(r.url).hostname, 'redis.url');
    if (r.tls === undefined) {
      for (const n of r.cluster_nodes ?? []) beyond(n.host, 'redis.cluster_nodes');
      for (const n of r.sentinels ?? []) beyond(n.host, 'redis.sentinels');
    }
  } else if (s.kind === 'webhook') {
    const u = new URL(s.webhook.url);
    if (u.protocol === 'http:' && !isLoopbackHost(u.hostname))
      out.push([
        'webhook.url',
        `${u.hostname} is beyond this host and would get events in clear over http:; use https:, or ${TLS_PROXY_SETTING}=1 when a TLS proxy carries it`,
      ]);
  } else if (s.kind === 'jetstream' && s.tls === undefined) {
    for (const server of s.servers) if (server.startsWith('nats:')) beyond(new URL(server).hostname, 'servers');
  }
  return out;
}

/** The host of a postgres:// URL; undefined for a socket directory or a string URL cannot read. */
function postgresHost(connectionString: string): string | undefined {
  try {
    const host = new URL(connectionString).hostname;
    return host === '' ? undefined : host.replace(/^\[|\]$/g, '');
  } catch {
    return undefined;
  }
}

function redisEndpoint(
  r: {
    url?: string | undefined;
    cluster_nodes?: HostPort[] | undefined;
    sentinels?: HostPort[] | undefined;
    sentinel_name?: string | undefined;
    username?: string | undefined;
  },
  password: string | undefined,
  sentinelPassword: string | undefined,
  tls: TlsMaterial | undefined,
): RedisEndpoint {
  const redisTls: RedisTls | undefined = tls;
  if (r.url !== undefined) {
    const u = new URL(r.url);
    if (r.username !== undefined) u.username = r.username;
    if (password !== undefined) u.password = password;
    return redisTls === undefined ? { mode: 'single', url: u.toString() } : { mode: 'single', url: u.toString(), tls: redisTls };
  }
  const auth = { username: r.username, password, tls: tls !== undefined, ...(redisTls === undefined ? {} : { tlsOptions: redisTls }) };
  if (r.cluster_nodes !== undefined) return { mode: 'cluster', nodes: r.cluster_nodes, auth };
  return { mode: 'sentinel', sentinels: r.sentinels ?? [], name: r.sentinel_name ?? '', sentinelPassword, auth };
}

/** WEBHOOK_SECRET's shape: `whsec_` and the key in base64 (jobs/webhooks/signature.ts). */
const WEBHOOK_SECRET_SHAPE = /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/;

type Read = { ok: true; value: string } | { ok: false; problem: string };

/** A secret by reference: its file's text (one trailing newline dropped) or a systemd credential; never quoted. */
function readSecret(ref: SecretRef, env: NodeJS.ProcessEnv): Read {
  let path: string;
  if ('file' in ref) path = ref.file;
  else {
    const dir = env.CREDENTIALS_DIRECTORY;
    if (dir === undefined || dir === '') return { ok: false, problem: `the credential ${ref.credential}: CREDENTIALS_DIRECTORY is unset` };
    path = join(dir, ref.credential);
  }
  try {
    statSync(path);
    const text = readFileSync(path, 'utf8');
    const value = text.replace(/\r?\n$/, '');
    if (value === '') return { ok: false, problem: `${path}: is empty` };
    return { ok: true, value };
  } catch (err) {
    return { ok: false, problem: `${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
}

/** `sinks[1] "audit-bus".redis.url`: the path with the sink's name where it has one. */
function namedPath(json: unknown, path: readonly PropertyKey[]): string {
  const [first, index, ...rest] = path;
  if (first !== 'sinks' || typeof index !== 'number') return formatPath(path);
  const sinks = (json as { sinks?: unknown }).sinks;
  const entry: unknown = Array.isArray(sinks) ? sinks[index] : undefined;
  const name = typeof entry === 'object' && entry !== null ? (entry as { name?: unknown }).name : undefined;
  const head = typeof name === 'string' ? `sinks[${index}] ${JSON.stringify(name)}` : `sinks[${index}]`;
  return rest.length === 0 ? head : formatPath(rest, head);
}

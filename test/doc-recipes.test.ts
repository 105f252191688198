/**
 * Every recipe in the docs runs as written (issue 29, "the first hour").
 * Each fenced block of README.md, docs/*.md, jobs/*.md, bench/README.md and
 * db/SCHEMA.md is taken from the page and checked by its language:
 *
 * - sh, bash, shell: `bash -n`, then run (with `set -e -o pipefail`) unless
 *   RECIPES below says it is syntax only, with the reason, or run as written
 *   by another test. A block RECIPES does not list is run: a new recipe works
 *   here or gets classified. A syntax-only `pm2 start ecosystem.config.cjs`
 *   line still has the ecosystem file loaded with the environment it gives.
 * - ts, typescript, js, javascript: type-checked together by tsc (strict,
 *   NodeNext) in a project that installed user-mirror, then run like the
 *   shell blocks (Node strips the types).
 * - python: `py_compile`, then run, unless it imports a module this machine
 *   does not have: the test's name then says which (BullMQ for Python cannot
 *   be installed here; its registries are npm and Debian's).
 * - sql: test/doc-sql.test.ts runs every statement; here, that it reads each page that has one.
 * - json: parses; an event in docs/changes.md also matches ChangeEventSchema.
 * - conf: the redis.conf of docs/removals.md: a redis-server started with it is judged durable.
 * - ini: a systemd unit: sections and Key=Value lines (no systemd here to load it).
 * - text: listings and output samples.
 *
 * The session the recipes run in, shared by all: a project folder that
 * installed user-mirror (node_modules/user-mirror links this checkout, so
 * `npx user-mirror`, a bare `user-mirror` and the SDK resolve), holding
 * `data/mirror.db` from a real `sync --once` against the stand-in (5,000
 * users and `customer/42`; CHANGES_BASELINE=events, so the feed goes past
 * the docs' cursor 4811); this checkout's Node first on PATH; and the
 * environment the docs tell a reader to set (REPLICA_API_KEY as the serve
 * recipe sets it; no header: the replica accepts the SDK's by default). Recipes name fixed
 * ports (the stand-in's 8787, the replica's 8788), so they run in a private
 * network namespace (`unshare -rn`, entered with nsenter): nothing binds or
 * reaches a port of the shared machine. Recipes that are servers start
 * first, serve the others, and are stopped at the end with Ctrl-C (SIGINT to
 * their process group): each must end by itself. Where no namespace can be
 * made, the recipes that run say in their names that they did not.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeEventSchema } from '../db/change-event.js';
import { openMirror } from '../db/open.js';
import { openChangeFeed } from '../db/change-feed.js';
import { readEstateDurability } from '../jobs/redis-durability.js';
import { generateUser, startStandIn, userKeys } from '../src/stand-in/index.js';
import { ROOT, runCli } from './support/daemon-process.js';
import { eventually } from './support/eventually.js';
import { freePort } from './support/redis-server.js';

const PAGES = [
  'README.md',
  ...['docs', 'jobs']
    .flatMap((dir) => readdirSync(join(ROOT, dir)).map((f) => `${dir}/${f}`))
    .filter((f) => f.endsWith('.md'))
    .sort(),
  'bench/README.md',
  'db/SCHEMA.md',
];

interface Block {
  page: string;
  line: number;
  lang: string;
  text: string;
}

/** Fenced blocks: a line of three backticks and a language, to the next line of three backticks. */
function blocksOf(page: string): Block[] {
  const lines = readFileSync(join(ROOT, page), 'utf8').split('\n');
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i] ?? '');
    if (open === null) continue;
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    if (end < 0) throw new Error(`${page}:${i + 1}: a code block that never closes`);
    out.push({ page, line: i + 1, lang: open[1] ?? '', text: lines.slice(i + 1, end).join('\n') + '\n' });
    i = end;
  }
  return out;
}

const BLOCKS = PAGES.flatMap(blocksOf);
const KIND: Record<string, 'shell' | 'ts' | 'js' | 'python' | 'sql' | 'json' | 'conf' | 'ini' | 'text'> = {
  sh: 'shell',
  bash: 'shell',
  shell: 'shell',
  ts: 'ts',
  typescript: 'ts',
  js: 'js',
  javascript: 'js',
  python: 'python',
  sql: 'sql',
  json: 'json',
  conf: 'conf',
  ini: 'ini',
  text: 'text',
  console: 'text',
};
const kindOf = (b: Block) => KIND[b.lang];
const idOf = (b: Block) => `${b.page}:${b.line} ${b.lang}`;

/** The session a recipe runs in (see the header). */
interface Session {
  dir: string;
  env: Record<string, string>;
  /** The newest cursor of the prepared mirror's feed. */
  latest: number;
  users: number;
}

interface Output {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

interface Run {
  /** A server: started before the other recipes, ready once its stdout matches; Ctrl-C at the end. */
  server?: RegExp;
  /** Ctrl-C (as a terminal sends it, to the process group) once stdout matches: for a recipe that runs until then. */
  interrupt?: (s: Session) => RegExp;
  stdin?: string;
  /** What its output must show, beyond a clean exit. */
  expect?: (out: Output, s: Session) => void;
}

type How = { run: Run } | { syntax: string } | { by: string };

/**
 * The reviewed list: each recipe by page and a stable snippet of it. Runs
 * here (`run`), is run as written by another test (`by`), or is syntax only
 * (`syntax`, with the reason). A block not listed runs with `{}`.
 */
const RECIPES: Array<{ page: string; snippet: string; how: How }> = [
  {
    page: 'docs/postgres.md',
    snippet: 'node dist/src/sinks/postgres/main.js data/mirror.db',
    how: {
      syntax:
        "a pass into the reader's own PostgreSQL with its own connection file; test/postgres-sink.test.ts runs dist/src/sinks/postgres/main.js with a mirror and the options JSON the same way",
    },
  },
  {
    page: 'docs/sinks.md',
    snippet: 'redis-cli XGROUP CREATE',
    how: {
      syntax:
        "a consumer of the reader's own stream (its Redis, its key); test/sinks-redis.test.ts and test/sinks-daemon.test.ts read what a sink appends, entry ids and fields as the page gives them",
    },
  },
  {
    page: 'docs/sinks.md',
    snippet: 'nats consumer add USER_MIRROR billing',
    how: {
      syntax:
        "the nats CLI (not packaged here) against the reader's JetStream; test/sinks-jetstream.test.ts reads what a sink publishes with a JetStream consumer, subjects and headers as the page gives them",
    },
  },
  {
    page: 'docs/tracing.md',
    snippet: 'OTEL_SERVICE_NAME=removal-worker npx user-mirror worker removals &',
    how: {
      syntax:
        "a host's removal traced to its OTLP receiver (Jaeger, a Collector); test/removal-trace.test.ts runs the same two commands with the same variables against a real OTLP/HTTP receiver",
    },
  },
  {
    page: 'docs/backup.md',
    snippet: 'user-mirror backup /srv/backups/mirror-before-upgrade.db',
    how: { by: 'test/backup-restore.test.ts' },
  },
  {
    page: 'docs/backup.md',
    snippet: 'user-mirror restore /srv/backups/mirror-20261128T070700000Z.db',
    how: {
      syntax:
        "a host's drill (pm2 stop/start, /srv); test/backup-restore.test.ts runs its restore step as written, refusals and the feed after it included",
    },
  },
  {
    page: 'README.md',
    snippet: 'npm ci && npm run demo',
    how: {
      syntax:
        "npm ci reinstalls this checkout's node_modules under the running suite; the demo runs in test/demo.test.ts, and npm test is the whole suite",
    },
  },
  {
    page: 'README.md',
    snippet: 'npm ci && npm test && npm pack',
    how: {
      syntax: 'a deployment: CI and a host (/srv, pm2 startup as root); test/release.test.ts performs its steps on the packed artefact',
    },
  },
  {
    page: 'docs/operations.md',
    snippet: 'npx pm2 start ecosystem.config.cjs     # without the MANAGEMENT_ line',
    how: { syntax: "starts a pm2 daemon against a host's service and key files; test/pm2.test.ts runs ecosystem.config.cjs under pm2" },
  },
  {
    page: 'docs/security.md',
    snippet: 'install -m 0644 /srv/user-mirror/contrib/systemd/user-mirror.service /etc/systemd/system/',
    how: {
      syntax: 'installs the unit on a host as root (an account, /etc, systemctl); test/contrib-systemd.test.ts scores and reads the unit',
    },
  },
  {
    page: 'docs/backup.md',
    snippet: 'ExecStart=/usr/bin/litestream replicate',
    how: {
      syntax:
        'a systemd unit for a host running Litestream; no systemd runs here (test/litestream-replica.test.ts runs the same replicate command)',
    },
  },
  {
    page: 'docs/alerts.md',
    snippet: 'promtool check rules /etc/prometheus/rules/user-mirror.rules.yml',
    how: { syntax: "a host's Prometheus (/etc/prometheus, systemctl); test/contrib-prometheus.test.ts runs promtool on the shipped rules" },
  },
  {
    page: 'docs/backup.md',
    snippet: 'litestream restore -config /srv/user-mirror/contrib/litestream/litestream.yml',
    how: {
      syntax:
        "a host's restore drill (/etc, /srv, S3 keys, systemd); test/litestream-replica.test.ts runs its litestream restore with the same configuration and checks the restored mirror's answers",
    },
  },
  {
    page: 'docs/replica.md',
    snippet: 'REPLICA_PORT=8788 REPLICA_API_KEY_FILE=',
    how: {
      syntax:
        "starts a pm2 daemon against a host's service and key files; test/pm2.test.ts runs ecosystem.config.cjs under pm2 and checks its replica app",
    },
  },
  { page: 'README.md', snippet: 'export MIRROR_DB=data/demo.db', how: { by: 'test/demo.test.ts' } },
  { page: 'docs/changes.md', snippet: 'export function verifyWebhook', how: { by: 'test/webhook-docs.test.ts' } },
  { page: 'docs/changes.md', snippet: 'def verify_webhook', how: { by: 'test/webhook-docs.test.ts' } },
  { page: 'docs/removals.md', snippet: 'enqueueMemberRemoval(queue', how: { by: 'test/producer-docs.test.ts' } },
  { page: 'docs/removals.md', snippet: 'def removal_target', how: { by: 'test/producer-docs.test.ts' } },
  { page: 'docs/removals.md', snippet: 'openssl req -x509 -newkey rsa:2048', how: { by: 'test/redis-tls.test.ts' } },
  { page: 'docs/replica.md', snippet: '-subj /CN=user-mirror-ca', how: { by: 'test/replica-tls.test.ts' } },
  {
    page: 'docs/stand-in.md',
    snippet: 'npx user-mirror stand-in --port 8787 --users 100000 --seed 1',
    how: {
      run: {
        server: /^export SERVICE_BASE_URL=http:\/\/127\.0\.0\.1:8787$/m,
        expect: (out) => expect(out.stderr).toContain('user-mirror stand-in: stopped (SIGINT)'),
      },
    },
  },
  {
    page: 'docs/replica.md',
    snippet: 'REPLICA_API_KEY=rk_choose_a_long_random_key user-mirror serve',
    how: { run: { server: /"event":"replica.listening".*"port":8788/, expect: (out) => expect(out.stdout).toContain('replica stopped') } },
  },
  {
    page: 'docs/stand-in.md',
    snippet: "curl -s 'http://127.0.0.1:8787/v2/user?limit=1'",
    how: {
      run: {
        expect: (out) => {
          expect(out.stdout).not.toContain('"detail"');
          for (const action of ['updated', 'deleted', 'restored', 'added'])
            expect(out.stdout, action).toMatch(new RegExp(`"action":\\s*"${action}"`));
        },
      },
    },
  },
  {
    page: 'docs/changes.md',
    snippet: 'user-mirror changes --json --after 4711',
    how: {
      run: {
        interrupt: (s) => new RegExp(`^ +${s.latest}  `, 'm'),
        expect: (out, s) => {
          const events = out.stdout.split('\n').filter((l) => l.startsWith('{"id"'));
          expect(events.map((l) => (JSON.parse(l) as { cursor: number }).cursor)).toEqual(
            Array.from({ length: s.latest - 4711 }, (_, i) => 4712 + i),
          );
          expect(out.stdout).toContain('"next":4811}');
        },
      },
    },
  },
  {
    page: 'docs/replica.md',
    snippet: "replica.user.getByClientUserId('customer/42')",
    how: { run: { expect: (out, s) => expect(out.stdout).toMatch(new RegExp(`^[0-9a-f-]{36} 500 of ${s.users} users$`, 'm')) } },
  },
  {
    page: 'docs/replica.md',
    snippet: 'r = requests.get(',
    how: { run: { expect: (out) => expect(out.stdout).toMatch(/^\d{4}-\d\d-\d\dT\S+ None$/m) } },
  },
  {
    page: 'docs/sql.md',
    snippet: 'sqlite3 -readonly data/mirror.db',
    how: { run: { stdin: 'SELECT count(*) FROM users;\n', expect: (out, s) => expect(out.stdout.trim()).toBe(String(s.users)) } },
  },
  { page: 'docs/removals.md', snippet: '# redis.conf', how: { run: {} } },
];

function howOf(b: Block): How {
  const matches = RECIPES.filter((r) => r.page === b.page && b.text.includes(r.snippet));
  if (matches.length > 1) throw new Error(`${idOf(b)}: matched by ${matches.length} RECIPES entries; make the snippets distinct`);
  return matches[0]?.how ?? { run: {} };
}

/** A private network namespace can be made here (user and network namespaces, and `ip` to bring up its loopback). */
const NAMESPACE: { ok: true } | { ok: false; why: string } = (() => {
  const probe = spawnSync('unshare', ['-rn', 'sh', '-c', 'ip link set lo up'], { encoding: 'utf8' });
  if (probe.status === 0) return { ok: true };
  return { ok: false, why: `unshare -rn: ${(probe.error?.message ?? probe.stderr).trim() || `exit ${probe.status}`}` };
})();

/** Top-level modules a Python block imports that this machine's python3 does not have. */
function missingModules(text: string): string[] {
  const names = new Set<string>();
  for (const m of text.matchAll(/^\s*(?:import\s+([\w., ]+)|from\s+(\w+)[\w.]*\s+import\b)/gm)) {
    for (const n of (m[1] ?? m[2] ?? '').split(',')) {
      const top = n.trim().split(/[.\s]/)[0];
      if (top) names.add(top);
    }
  }
  if (names.size === 0) return [];
  const probe = spawnSync(
    'python3',
    ['-c', 'import importlib.util, sys; print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))', ...names],
    { encoding: 'utf8' },
  );
  if (probe.status !== 0) throw new Error(`python3 could not look for modules: ${probe.stderr}`);
  return probe.stdout.split(/\s+/).filter((n) => n !== '');
}

const shell = BLOCKS.filter((b) => kindOf(b) === 'shell');
const code = BLOCKS.filter((b) => kindOf(b) === 'ts' || kindOf(b) === 'js');
const python = BLOCKS.filter((b) => kindOf(b) === 'python');
const runnable = BLOCKS.filter((b) => ['shell', 'ts', 'js', 'python'].includes(kindOf(b) ?? '') && 'run' in howOf(b));
const servers = runnable.filter((b) => (howOf(b) as { run: Run }).run.server !== undefined);

let work: string;
let session: Session;
let holder: ChildProcess | undefined;
const started = new Map<Block, Proc>();

interface Proc {
  child: ChildProcess;
  out(): Output;
  ended: Promise<Output>;
  waitFor(pattern: RegExp, ms: number): Promise<void>;
}

/** Runs `argv` in the session's namespace and folder, in a process group of its own (for Ctrl-C). */
function spawnInSession(argv: string[], stdin?: string): Proc {
  if (holder?.pid === undefined) throw new Error('no namespace');
  const child = spawn('nsenter', ['-t', String(holder.pid), '-U', '-n', '--preserve-credentials', '--', ...argv], {
    cwd: session.dir,
    env: session.env,
    detached: true,
    stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (stdin !== undefined) child.stdin?.end(stdin);
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
    for (const l of listeners) l();
  });
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const out = (code: number | null = null, signal: NodeJS.Signals | null = null): Output => ({ code, signal, stdout, stderr });
  const ended = new Promise<Output>((resolve) => child.once('close', (c, s) => resolve(out(c, s))));
  return {
    child,
    out: () => out(child.exitCode, child.signalCode),
    ended,
    waitFor: (pattern, ms) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (!pattern.test(stdout)) return;
          clearTimeout(timer);
          listeners.delete(check);
          resolve();
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(
            new Error(`no output matching ${pattern} within ${ms} ms\nstdout: ${stdout.slice(-2000)}\nstderr: ${stderr.slice(-2000)}`),
          );
        }, ms);
        listeners.add(check);
        void ended.then(() => {
          if (listeners.delete(check)) {
            clearTimeout(timer);
            reject(new Error(`ended before output matching ${pattern}\nstdout: ${stdout.slice(-2000)}\nstderr: ${stderr.slice(-2000)}`));
          }
        });
        check();
      }),
  };
}

/** Ctrl-C, as a terminal sends it: SIGINT to the whole process group. */
function interrupt(p: Proc): void {
  if (p.child.pid !== undefined && p.child.exitCode === null && p.child.signalCode === null) process.kill(-p.child.pid, 'SIGINT');
}

async function within(p: Proc, ms: number): Promise<Output> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      if (p.child.pid !== undefined) process.kill(-p.child.pid, 'SIGKILL');
      reject(new Error(`still running after ${ms} ms\nstdout: ${p.out().stdout.slice(-2000)}\nstderr: ${p.out().stderr.slice(-2000)}`));
    }, ms);
  });
  try {
    return await Promise.race([p.ended, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The command line that runs a block, its source written into the session's folder first. */
function commandFor(b: Block): string[] {
  const name = `recipe-${b.page.replace(/\W/g, '-')}-${b.line}`;
  switch (kindOf(b)) {
    case 'shell':
      return ['bash', '-e', '-o', 'pipefail', '-c', b.text];
    case 'python':
      writeFileSync(join(session.dir, `${name}.py`), b.text);
      return ['python3', `${name}.py`];
    default:
      writeFileSync(join(session.dir, `${name}.${kindOf(b) === 'ts' ? 'mts' : 'mjs'}`), b.text);
      return ['node', `${name}.${kindOf(b) === 'ts' ? 'mts' : 'mjs'}`];
  }
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'user-mirror-recipes-'));
  const dir = join(work, 'project');
  // A project that installed user-mirror and the SDK: npx and a bare `user-mirror` find the bin.
  mkdirSync(join(dir, 'node_modules', '.bin'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'recipes', private: true, dependencies: { 'user-mirror': '*' } }));
  symlinkSync(ROOT, join(dir, 'node_modules', 'user-mirror'));
  for (const scope of ['@tryvital', '@types']) symlinkSync(join(ROOT, 'node_modules', scope), join(dir, 'node_modules', scope));
  symlinkSync('../user-mirror/dist/cli.js', join(dir, 'node_modules', '.bin', 'user-mirror'));

  // The mirror the recipes read: a real sync of the stand-in, every user an event.
  const users = 5_000;
  const keys = userKeys(29);
  const customer = { ...generateUser(keys, 1_000_000), user_id: randomUUID(), client_user_id: 'customer/42' };
  const standIn = await startStandIn({ port: 0, users, seed: 29, records: [customer] });
  try {
    const sync = await runCli(
      ['sync', '--once'],
      {
        SERVICE_BASE_URL: standIn.baseUrl,
        SERVICE_API_KEY: standIn.apiKey,
        SERVICE_API_KEY_HEADER: standIn.apiKeyHeader,
        MIRROR_DB: join(dir, 'data', 'mirror.db'),
        CHANGES_BASELINE: 'events',
      },
      120_000,
    );
    expect(sync.code, sync.stderr).toBe(0);
  } finally {
    await standIn.close();
  }
  const db = openMirror(join(dir, 'data', 'mirror.db'), { readonly: true });
  const latest = openChangeFeed(db)?.bounds().latest ?? 0;
  db.close();
  session = {
    dir,
    latest,
    users: users + 1,
    env: {
      PATH: `${dirname(process.execPath)}:${join(dir, 'node_modules', '.bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: process.env.HOME ?? work,
      LANG: 'C.UTF-8',
      // A shell a person types into is at least level 1; at 0, bash on a socket stdin (Node's pipes) would read ~/.bashrc.
      SHLVL: '1',
      // What docs/replica.md has the reader set: the serve recipe's key (the SDK's header is accepted by default).
      REPLICA_API_KEY: 'rk_choose_a_long_random_key',
    },
  };
  if (!NAMESPACE.ok) return;

  // Holds the namespace until its stdin closes: at the end, or when this process dies.
  holder = spawn('unshare', ['-rn', 'sh', '-c', 'ip link set lo up && echo up && read -r _'], { stdio: ['pipe', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    holder?.stdout?.once('data', () => resolve());
    holder?.once('exit', (c) => reject(new Error(`the namespace holder exited (${c})`)));
  });
  const ready = servers.map((b) => {
    const p = spawnInSession(commandFor(b));
    started.set(b, p);
    return p.waitFor((howOf(b) as { run: Run }).run.server ?? /$/, 30_000);
  });
  await Promise.all(ready);
});

/** Kills what the session started: at the end, and if this process exits first. */
function stopSession(): void {
  for (const p of started.values()) {
    if (p.child.pid === undefined || p.child.exitCode !== null || p.child.signalCode !== null) continue;
    try {
      process.kill(-p.child.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  holder?.kill('SIGKILL');
}
process.once('exit', stopSession);

afterAll(() => {
  stopSession();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the docs', () => {
  it('label every code block with a language this test knows', () => {
    expect(BLOCKS.filter((b) => kindOf(b) === undefined).map(idOf)).toEqual([]);
  });

  it('classify only blocks that exist (every RECIPES entry matches a block)', () => {
    const stale = RECIPES.filter((r) => !BLOCKS.some((b) => b.page === r.page && b.text.includes(r.snippet)));
    expect(stale.map((r) => `${r.page}: ${r.snippet}`)).toEqual([]);
  });

  // PostgreSQL's recipes need a cluster: test/postgres-recipes.test.ts starts one and runs them beside docs/sql.md's.
  const sqlRunner = (page: string) => (page === 'docs/postgres.md' ? 'test/postgres-recipes.test.ts' : 'test/doc-sql.test.ts');
  it.each(BLOCKS.filter((b) => kindOf(b) === 'sql').map((b) => [idOf(b), sqlRunner(b.page), b] as const))(
    '%s: run by %s',
    (_id, runner, b) => {
      expect(readFileSync(join(ROOT, runner), 'utf8')).toContain(`'${b.page}'`);
    },
  );

  it.each(BLOCKS.filter((b) => kindOf(b) === 'json').map((b) => [idOf(b), b] as const))('%s: parses', (_id, b) => {
    const value: unknown = JSON.parse(b.text);
    if (b.page === 'docs/changes.md') ChangeEventSchema.parse(value);
  });

  it.each(
    BLOCKS.filter((b) => kindOf(b) === 'ini').map((b) => {
      const how = howOf(b);
      return [idOf(b), 'syntax' in how ? how.syntax : 'unclassified', b] as const;
    }),
  )('%s: syntax only (%s): a unit of [Section]s and Key=Value lines', (_id, _why, b) => {
    expect('syntax' in howOf(b), `${idOf(b)}: a unit runs nowhere here; classify it as syntax only, with the reason`).toBe(true);
    const lines = b.text.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
    expect(lines.filter((l) => !/^\[[A-Za-z]+\]$|^[A-Za-z]+=\S/.test(l))).toEqual([]);
    expect(lines).toContain('[Service]');
  });

  it.each(BLOCKS.filter((b) => kindOf(b) === 'conf').map((b) => [idOf(b), b] as const))(
    '%s: a redis-server started with it keeps queued jobs (judged durable, no warning)',
    async (_id, b) => {
      expect(b.text.startsWith('# redis.conf\n')).toBe(true);
      const dir = mkdtempSync(join(work, 'redis-'));
      writeFileSync(join(dir, 'redis.conf'), b.text);
      const port = await freePort();
      const server = spawn('redis-server', [join(dir, 'redis.conf'), '--port', String(port), '--bind', '127.0.0.1', '--dir', dir], {
        stdio: 'ignore',
      });
      const client = new Redis({ port, maxRetriesPerRequest: null, retryStrategy: () => 100 });
      client.on('error', () => undefined);
      try {
        await eventually(async () => ((await client.ping()) === 'PONG' ? true : undefined), 10_000, 'redis-server with the recipe');
        const verdict = await readEstateDurability(client);
        expect(verdict).toMatchObject({ durable: true, warnings: [] });
        expect(verdict.settings).toEqual({ appendonly: 'yes', appendfsync: 'everysec', maxmemoryPolicy: 'noeviction' });
      } finally {
        client.disconnect();
        server.kill('SIGKILL');
      }
    },
  );
});

describe.each(shell.map((b) => [idOf(b), b] as const))('%s', (_id, b) => {
  it('is valid bash (bash -n)', () => {
    const check = spawnSync('bash', ['-n'], { input: b.text, encoding: 'utf8' });
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
  });

  const how = howOf(b);
  if ('syntax' in how) {
    // Each `pm2 start` line's environment must be one ecosystem.config.cjs accepts (it refuses keys by value).
    const starts = b.text
      .replace(/\\\n/g, ' ')
      .split('\n')
      .filter((l) => /pm2 start ecosystem\.config\.cjs/.test(l));
    it(`syntax only: ${how.syntax}${starts.length > 0 ? '; its pm2 start loads ecosystem.config.cjs' : ''}`, () => {
      for (const line of starts) {
        const prefix = line.slice(0, line.indexOf('npx pm2 start')).replace(/^.*(&&|;)/, '');
        const load = `${prefix} node -e 'require(process.argv[1])' ${join(ROOT, 'ecosystem.config.cjs')}`;
        const res = spawnSync('bash', ['-c', load], {
          cwd: work,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { PATH: session.env.PATH ?? '', SHLVL: '1', ENV_FILE: '/dev/null', USER_MIRROR_LOG_DIR: join(work, 'logs') },
        });
        expect(res.stderr, line).toBe('');
        expect(res.status, line).toBe(0);
      }
    });
  }
});

describe.each(python.map((b) => [idOf(b), b] as const))('%s', (_id, b) => {
  it('compiles (py_compile)', () => {
    const file = join(work, `compile-${b.line}.py`);
    writeFileSync(file, b.text);
    const res = spawnSync('python3', ['-m', 'py_compile', file], { encoding: 'utf8' });
    expect(res.stderr).toBe('');
    expect(res.status).toBe(0);
  });
  const missing = missingModules(b.text);
  if (missing.length > 0)
    it(`is not run here: it imports ${missing.join(', ')}, which this machine's python3 does not have`, () => {
      expect(missingModules(b.text)).toEqual(missing);
    });
});

describe('the TypeScript and JavaScript blocks', () => {
  it(`type-check as a project that installed user-mirror would compile them (${code.map(idOf).join(', ')})`, () => {
    const dir = join(session.dir, 'typecheck');
    mkdirSync(dir, { recursive: true });
    const files = code.map((b) => {
      const file = `${b.page.replace(/\W/g, '-')}-${b.line}.${kindOf(b) === 'ts' ? 'mts' : 'mjs'}`;
      writeFileSync(join(dir, file), b.text);
      return file;
    });
    const compilerOptions = {
      strict: true,
      module: 'nodenext',
      moduleResolution: 'nodenext',
      target: 'es2023',
      noEmit: true,
      allowJs: true,
      checkJs: true,
      skipLibCheck: true,
      types: ['node'],
    };
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }));
    const res = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { encoding: 'utf8' });
    expect(res.stdout + res.stderr).toBe('');
    expect(res.status).toBe(0);
  });
});

/** What a run recipe's test is called; undefined for those with no run to do (syntax only, or a module missing: said above). */
function runTitle(b: Block, how: How): string | undefined {
  if ('by' in how) return `run as written by ${how.by}`;
  if ('syntax' in how || (kindOf(b) === 'python' && missingModules(b.text).length > 0)) return undefined;
  if (!NAMESPACE.ok) return `NOT RUN: no private network namespace for the docs' fixed ports here (${NAMESPACE.why})`;
  return how.run.server !== undefined ? 'serves the other recipes, then stops on Ctrl-C' : 'runs as written in the session';
}

const runs = [...shell, ...code, ...python].flatMap((b) => {
  const how = howOf(b);
  const title = runTitle(b, how);
  return title === undefined ? [] : [[idOf(b), b, how, title] as const];
});

// Servers last: every other recipe uses them first.
describe.each([...runs.filter(([, b]) => !servers.includes(b)), ...runs.filter(([, b]) => servers.includes(b))])(
  '%s',
  (_id, b, how, title) => {
    if ('by' in how) {
      it(title, () => expect(readFileSync(join(ROOT, how.by), 'utf8')).toContain(b.page));
      return;
    }
    if (!('run' in how) || !NAMESPACE.ok) {
      it(title, () => expect(NAMESPACE.ok).toBe(false));
      return;
    }
    const spec = how.run;
    if (spec.server !== undefined) {
      it(title, async () => {
        const p = started.get(b);
        if (p === undefined) throw new Error('not started');
        interrupt(p);
        const out = await within(p, 20_000);
        // npm (npx) ends by the signal itself on Ctrl-C; the server it ran must have stopped on its own (spec.expect).
        expect(out.code === 0 || out.signal === 'SIGINT' || out.code === 130, `${out.code ?? out.signal} ${out.stderr}`).toBe(true);
        spec.expect?.(out, session);
      });
      return;
    }
    it(
      title,
      async () => {
        const p = spawnInSession(commandFor(b), spec.stdin);
        if (spec.interrupt !== undefined) {
          await p.waitFor(spec.interrupt(session), 30_000);
          interrupt(p);
        }
        const out = await within(p, 60_000);
        expect(out.code, `stdout: ${out.stdout.slice(-2000)}\nstderr: ${out.stderr.slice(-2000)}`).toBe(0);
        spec.expect?.(out, session);
      },
      90_000,
    );
  },
);

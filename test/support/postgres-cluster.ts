/**
 * A private PostgreSQL cluster for one test file: `initdb` into a fresh
 * temporary directory, `pg_ctl start` on a free port of 127.0.0.1 with its
 * Unix socket in that directory, trust authentication for the superuser
 * `postgres` (only reachable from this host, only for the test's life), and
 * stopped (`-m immediate`) and removed by `stop()` or at test-process exit.
 * Never the machine's shared server on 5432.
 *
 * `initdb` refuses to run as root, so as root the cluster's directory is
 * handed to the `postgres` account and the server runs under it
 * (`runuser -u postgres`). Debian's binaries live in
 * /usr/lib/postgresql/<major>/bin (PG_BIN overrides); `.ci/run` installs the
 * package where `initdb` is missing.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './redis-server.js';

const run = promisify(execFile);

export interface PostgresCluster {
  host: string;
  port: number;
  /** The cluster's directory (data in `data/`, the socket and the log beside it). */
  dir: string;
  /** A connection string for the superuser to `database` (default `postgres`). */
  url(database?: string, user?: string): string;
  /** A connected superuser client to `database`; the caller ends it. */
  connect(database?: string): Promise<pg.Client>;
  /** Creates a database (and returns its connection string for the superuser). */
  createDatabase(name: string): Promise<string>;
  /** The server log so far, for a failing test's message. */
  log(): string;
  /** Stops the server (fast shutdown), keeping its data: PostgreSQL down, as an outage. */
  stopServer(): Promise<void>;
  /** Starts it again on the same port, after stopServer. */
  startServer(): Promise<void>;
  stop(): Promise<void>;
}

const live = new Set<string>();

// A test process that dies must not leave a server behind.
process.once('exit', () => {
  for (const dir of live) {
    try {
      execFileSync(...asPostgres(pgBin('pg_ctl'), ['-D', join(dir, 'data'), '-m', 'immediate', 'stop']), { stdio: 'ignore' });
    } catch {
      // already down
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A PostgreSQL binary: PG_BIN, else the newest Debian major under /usr/lib/postgresql, else PATH. */
export function pgBin(name: string): string {
  if (process.env.PG_BIN !== undefined && process.env.PG_BIN !== '') return join(process.env.PG_BIN, name);
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const majors = readdirSync(base)
      .filter((d) => /^\d+$/.test(d))
      .sort((a, b) => Number(b) - Number(a));
    for (const major of majors) {
      const path = join(base, major, 'bin', name);
      if (existsSync(path)) return path;
    }
  }
  return name;
}

const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** The command line that runs `bin` as the cluster's owner: `postgres` when this process is root. */
function asPostgres(bin: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

export async function startPostgresCluster(): Promise<PostgresCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-pg-'));
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  }
  live.add(dir);
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  const host = '127.0.0.1';
  const log = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : '');
  try {
    await run(...asPostgres(pgBin('initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync']));
    const port = await freePort();
    // fsync off: the tests kill the client, never this server, and the machine is shared.
    const options = `-p ${port} -k ${dir} -c listen_addresses=${host} -c fsync=off -c full_page_writes=off -c synchronous_commit=off`;
    const startServer = async () => {
      await run(...asPostgres(pgBin('pg_ctl'), ['-D', data, '-l', logFile, '-o', options, '-w', '-t', '300', 'start']));
    };
    await startServer();
    const url = (database = 'postgres', user = 'postgres') => `postgres://${user}@${host}:${port}/${database}`;
    const connect = async (database = 'postgres') => {
      const client = new pg.Client({ connectionString: url(database) });
      await client.connect();
      return client;
    };
    return {
      host,
      port,
      dir,
      url,
      connect,
      async createDatabase(name) {
        const admin = await connect();
        try {
          await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
        } finally {
          await admin.end();
        }
        return url(name);
      },
      log,
      async stopServer() {
        await run(...asPostgres(pgBin('pg_ctl'), ['-D', data, '-m', 'fast', '-w', '-t', '300', 'stop']));
      },
      startServer,
      async stop() {
        if (!live.delete(dir)) return;
        await run(...asPostgres(pgBin('pg_ctl'), ['-D', data, '-m', 'immediate', 'stop'])).catch(() => undefined);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await run(...asPostgres(pgBin('pg_ctl'), ['-D', data, '-m', 'immediate', 'stop'])).catch(() => undefined);
    const detail = log();
    live.delete(dir);
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`could not start a private PostgreSQL cluster: ${(err as Error).message}${detail ? `\nserver log:\n${detail}` : ''}`, {
      cause: err,
    });
  }
}

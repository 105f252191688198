/**
 * A NATS server for tests: its own `nats-server -js` (Debian's package; on
 * PATH or in /usr/sbin) on a free port of 127.0.0.1 with its own store
 * directory, stopped after the tests; with `tls`, it takes TLS only (a
 * config file: its certificate, the client CA, client certificates asked
 * for or not), its INFO line still in clear as NATS sends it. Never the machine's shared NATS: a
 * test only talks to the server it started. No nats-server is an error that
 * says what to install, never a silent skip.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './redis-server.js';
import { busyMachineDeadline } from './eventually.js';

export interface TestNats {
  url: string;
  port: number;
  /** Kills the server (SIGKILL) and leaves it down until `restart`. */
  kill(): Promise<void>;
  /** Starts it again on the same port and store. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

function binary(): string {
  for (const dir of (process.env.PATH ?? '').split(':').concat('/usr/sbin', '/usr/bin')) {
    const path = join(dir, 'nats-server');
    if (dir !== '' && existsSync(path)) return path;
  }
  throw new Error('nats-server is not installed: apt-get install nats-server (tests start their own on a free port)');
}

/** TLS for the server: its certificate and key, the CA its clients' certificates must come from, and whether it asks for one. */
export interface TestNatsTls {
  certFile: string;
  keyFile: string;
  caFile: string;
  verifyClients: boolean;
}

export async function startTestNats(options: { tls?: TestNatsTls } = {}): Promise<TestNats> {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-nats-'));
  const port = await freePort();
  const config: string[] = [];
  if (options.tls !== undefined) {
    const t = options.tls;
    // A config file: TLS has no command-line flag for the CA of client certificates.
    writeFileSync(
      join(dir, 'tls.conf'),
      `tls {\n  cert_file: ${JSON.stringify(t.certFile)}\n  key_file: ${JSON.stringify(t.keyFile)}\n  ca_file: ${JSON.stringify(t.caFile)}\n  verify: ${t.verifyClients}\n}\n`,
      { mode: 0o600 },
    );
    config.push('-c', join(dir, 'tls.conf'));
  }
  const launch = (p: number, d: string) => launchNats(p, d, config);
  let child: ChildProcess | undefined = await launch(port, dir);
  const down = async (): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill('SIGKILL');
    await exited;
  };
  return {
    url: `${options.tls === undefined ? 'nats' : 'tls'}://127.0.0.1:${port}`,
    port,
    kill: down,
    async restart() {
      await down();
      child = await launch(port, dir);
    },
    async stop() {
      await down();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function launchNats(port: number, dir: string, config: readonly string[]): Promise<ChildProcess> {
  const child = spawn(binary(), [...config, '-js', '-a', '127.0.0.1', '-p', String(port), '-sd', join(dir, 'store')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  const deadline = Date.now() + busyMachineDeadline(20_000);
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}: ${stderr.trim()}`);
    if (await answers(port)) return child;
    await sleep(50);
  }
  child.kill('SIGKILL');
  throw new Error(`nats-server did not answer on port ${port} within ${busyMachineDeadline(20_000) / 1000} s: ${stderr.trim()}`);
}

/** The server's INFO line arrives on connect. */
function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect(port, '127.0.0.1');
    s.once('data', (d) => {
      s.destroy();
      resolve(d.toString().startsWith('INFO'));
    });
    s.once('error', () => resolve(false));
  });
}

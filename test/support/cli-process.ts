/**
 * Runs the built CLI (`node dist/cli.js ...`) as a child process, the way an
 * operator or pm2 would. Needs `npm run build` first (`npm test` does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { busyMachineDeadline } from './eventually.js';

const HERE = fileURLToPath(new URL('../../', import.meta.url));
// From these sources or from their build under dist/ (a bench runs them built).
const ROOT = HERE.endsWith('/dist/') ? HERE.slice(0, -'dist/'.length) : HERE;
const CLI = `${ROOT}dist/cli.js`;

export function requireBuiltCli(...modules: string[]): void {
  for (const file of [CLI, ...modules.map((m) => `${ROOT}dist/${m}`)]) {
    if (!existsSync(file)) throw new Error(`${file} is missing: run \`npm run build\` before these tests`);
  }
}

export interface CliProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line matching `pattern`. */
  line(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited(timeoutMs?: number): Promise<number | null>;
}

/** `cwd`: where the command runs (default: this checkout), for relative paths as a recipe gives them. */
export function startCli(args: readonly string[], env: NodeJS.ProcessEnv, options: { cwd?: string } = {}): CliProcess {
  // No .env: a developer's ./.env must not reach the tests (a test that wants one sets ENV_FILE).
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ENV_FILE: '/dev/null', ...env },
    cwd: options.cwd ?? ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const waiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = [];
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
    for (const w of [...waiters]) {
      const hit = out.split('\n').find((l) => w.pattern.test(l));
      if (hit !== undefined) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(hit);
      }
    }
  });
  child.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    line(pattern, timeoutMs = 15_000) {
      const hit = out.split('\n').find((l) => pattern.test(l));
      if (hit !== undefined) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(new Error(`no line matching ${pattern} within ${busyMachineDeadline(timeoutMs)} ms\nstdout: ${out}\nstderr: ${err}`)),
          busyMachineDeadline(timeoutMs),
        );
        waiters.push({
          pattern,
          resolve: (line) => {
            clearTimeout(timer);
            resolve(line);
          },
        });
        void exit.then(() => {
          clearTimeout(timer);
          reject(new Error(`process exited before a line matching ${pattern}\nstdout: ${out}\nstderr: ${err}`));
        });
      });
    },
    exited(timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`process still running after ${busyMachineDeadline(timeoutMs)} ms\nstdout: ${out}\nstderr: ${err}`)),
          busyMachineDeadline(timeoutMs),
        );
        void exit.then((code) => {
          clearTimeout(timer);
          resolve(code);
        });
      });
    },
  };
}

/** Runs a command to completion. */
export async function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 30_000,
  options: { cwd?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = startCli(args, env, options);
  try {
    const code = await p.exited(timeoutMs);
    return { code, stdout: p.stdout(), stderr: p.stderr() };
  } catch (err) {
    p.child.kill('SIGKILL');
    throw err;
  }
}

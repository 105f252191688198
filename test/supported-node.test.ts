/**
 * The Node the CLI accepts: the table, package.json's `engines` rendered from
 * it, and the built bin refusing an unsupported Node with one line before it
 * loads anything (better-sqlite3 13 would segfault on Node 20).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { enginesRange, isSupportedNode, unsupportedNodeMessage } from '../src/runtime/supported-node.js';
import { ROOT } from './support/daemon-process.js';

const run = promisify(execFile);

describe('the supported Node releases', () => {
  it('package.json engines.node is the table, rendered', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(enginesRange());
    expect(enginesRange()).toBe('^22.19.0 || ^24.0.0 || >=26.0.0');
  });

  it.each([
    ['v22.19.0', true],
    ['v22.23.3', true],
    ['v24.0.0', true],
    ['v24.21.0', true],
    ['v26.12.1', true],
    ['v28.1.0', true],
    ['v20.20.2', false],
    ['v22.18.9', false],
    ['v23.11.1', false],
    ['v25.9.0', false],
    ['v18.20.8', false],
    ['not a version', false],
  ])('%s supported: %s', (version, supported) => {
    expect(isSupportedNode(version)).toBe(supported);
  });

  it('the message names the running Node and the ones needed, on one line', () => {
    const line = unsupportedNodeMessage('v20.20.2');
    expect(line).toMatch(
      /^user-mirror: Node\.js v20\.20\.2 is not supported; it needs Node\.js 22 \(22\.19\.0 or later\), 24, 26 or later/,
    );
    expect(line.trimEnd()).not.toContain('\n');
  });
});

describe('the built bin on an unsupported Node', () => {
  // A real process of the real bin; only process.version is made to read as Node 20's
  // (a preloaded module), since the suite runs on a supported Node.
  const asNode20 = `data:text/javascript,Object.defineProperty(process, "version", { value: "v20.20.2" })`;

  it('refuses with one line and exit 2, before loading the dispatcher', async () => {
    const err = await run(process.execPath, ['--import', asNode20, join(ROOT, 'dist/cli.js'), 'status'], { cwd: ROOT }).then(
      () => undefined,
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect(err?.code).toBe(2);
    expect(err?.stdout).toBe('');
    expect(err?.stderr).toBe(unsupportedNodeMessage('v20.20.2'));
  });

  it('runs on this Node', async () => {
    const { stdout } = await run(process.execPath, [join(ROOT, 'dist/cli.js'), '--version'], { cwd: ROOT });
    expect(stdout).toBe(
      `user-mirror ${(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version} (node ${process.version})\n`,
    );
  });
});

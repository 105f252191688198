/**
 * src/service/undici-parts.ts loads undici's Pool, its errors and its
 * request API from their own files, not from undici's index. In a process
 * of its own that never loads the index (as a sync's does not): a request
 * through that Pool is answered, and the classes are the very ones the
 * index exports once it is loaded. An upgrade of undici that moves a file
 * or wires its index differently fails here.
 */
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT } from './support/mirror-fixtures.js';

const PROBE = `
const partsUrl = process.argv[1];
const parts = await import(partsUrl);
const { createRequire } = await import('node:module');
const require = createRequire(partsUrl);
const index = require.resolve('undici');
const indexLoaded = index in require.cache;
const pool = new parts.Pool(process.argv[2], { connections: 1 });
const res = await pool.request({ path: '/probe', method: 'GET' });
const body = await res.body.text();
await pool.close();
const undici = require('undici');
const errorNames = ['HeadersTimeoutError', 'BodyTimeoutError', 'ConnectTimeoutError', 'RequestAbortedError'];
console.log(JSON.stringify({
  indexLoaded, status: res.statusCode, body,
  samePool: undici.Pool === parts.Pool,
  sameErrors: errorNames.every((n) => typeof undici.errors[n] === 'function' && undici.errors[n] === parts.undiciErrors[n]),
}));
`;

let server: Server;
let origin: string;

beforeAll(async () => {
  ensureBuilt();
  server = createServer((req, res) => res.end(`answered ${req.url}`));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

describe("undici's parts, loaded without its index", () => {
  it("send a request, and are the index's own Pool and error classes", async () => {
    const partsUrl = pathToFileURL(join(ROOT, 'dist/src/service/undici-parts.js')).href;
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--input-type=module', '-e', PROBE, partsUrl, origin], (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
      ),
    );
    expect(JSON.parse(out)).toEqual({ indexLoaded: false, status: 200, body: 'answered /probe', samePool: true, sameErrors: true });
  });
});

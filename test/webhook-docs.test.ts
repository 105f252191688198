/**
 * docs/changes.md gives receivers a signature check in Node and in Python.
 * Both are taken from the page as written and run, with the machine's node
 * and python3, against a real delivery from the webhook worker: they must
 * accept it, and refuse it with one byte of the body or the secret changed.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookRig, feedEvents, SECRET, startReceiver, type Received } from './support/webhook-rig.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';
import { eventually } from './support/eventually.js';
import { docBlock } from './support/doc-verifier.js';

let redis: TestRedis;
let delivered: Received;
let dir: string;

beforeAll(async () => {
  redis = await startTestRedis();
  const receiver = await startReceiver();
  const rig = await createWebhookRig(redis.url, receiver);
  try {
    await rig.startWorker();
    const { enqueueEvents } = await import('../jobs/webhooks/queue-handle.js');
    await enqueueEvents(rig.queue, feedEvents(1, 1), 30);
    delivered = await eventually(() => receiver.requests.find((r) => r.status === 204), 20_000, 'a delivery');
  } finally {
    await rig.close();
    await receiver.close();
  }
  dir = mkdtempSync(join(tmpdir(), 'webhook-docs-'));
});

afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs the page's check in `lang` on (secret, headers, body); true when it accepts. */
function check(lang: 'js' | 'python', secret: string, body: string): boolean {
  const input = JSON.stringify({ secret, headers: delivered.signed, body });
  if (lang === 'js') {
    const file = join(dir, 'verify.mjs');
    writeFileSync(
      file,
      `${docBlock('js')}\nconst i = JSON.parse(process.argv[2]);\nprocess.stdout.write(String(verifyWebhook(i.secret, i.headers, Buffer.from(i.body))));\n`,
    );
    return execFileSync(process.execPath, [file, input], { encoding: 'utf8' }) === 'true';
  }
  const file = join(dir, 'verify.py');
  writeFileSync(
    file,
    `${docBlock('python')}\nimport json, sys\ni = json.loads(sys.argv[1])\nprint(verify_webhook(i["secret"], i["headers"], i["body"].encode()), end="")\n`,
  );
  return execFileSync('python3', [file, input], { encoding: 'utf8' }) === 'True';
}

describe.each(['js', 'python'] as const)('the %s signature check in docs/changes.md', (lang) => {
  it('accepts a real delivery', () => {
    expect(delivered.verified).toBe(true);
    expect(check(lang, SECRET, delivered.body)).toBe(true);
  });

  it('refuses a changed body or another secret', () => {
    expect(check(lang, SECRET, delivered.body.replace('user.updated', 'user.deleted'))).toBe(false);
    expect(check(lang, `whsec_${Buffer.alloc(24, 7).toString('base64')}`, delivered.body)).toBe(false);
  });
});

/**
 * What the replica remembers between requests, and why it cannot go stale:
 * the freshness is read again whenever another connection committed
 * (PRAGMA data_version), and a resolve's record goes out as the bytes
 * stored, whether it is read as text or, when not valid UTF-8, as bytes.
 */
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SOURCE_HEADERS } from '../src/service/source-freshness.js';
import { encodePathSegment } from '../src/service/path-segment.js';
import { createReplicaRig, SDK_KEY_HEADER, type ReplicaRig } from './support/replica-rig.js';

describe('the replica between publishes', () => {
  let rig: ReplicaRig;
  let http: Client;
  const get = async (clientUserId: string) => {
    const res = await http.request({
      method: 'GET',
      path: `/v2/user/resolve/${encodePathSegment(clientUserId)}`,
      headers: { [SDK_KEY_HEADER]: rig.apiKey },
    });
    return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) };
  };
  const stored = (clientUserId: string) =>
    rig.sync.db
      .prepare<[string], Buffer>('SELECT CAST(raw AS BLOB) FROM users WHERE client_user_id = ? AND deleted_at IS NULL')
      .pluck()
      .get(clientUserId);
  const clientIdAt = (i: number) => String(rig.sync.standIn.directory.page(i, 1)[0]?.client_user_id);
  const lastPublished = () => rig.sync.db.prepare<[], number>('SELECT max(id) FROM sync_runs WHERE published_at IS NOT NULL').pluck().get();

  beforeAll(async () => {
    rig = await createReplicaRig({ users: 200, seed: 31 });
    expect((await rig.sync.sync()).status).toBe('succeeded');
    http = new Client(rig.baseUrl);
  });
  afterAll(async () => {
    await http?.close();
    await rig?.close();
  });

  it('answers a publish made between two requests with its record and its run', async () => {
    const id = clientIdAt(3);
    const before = await get(id);
    expect(before.headers[SOURCE_HEADERS.runId]).toBe(String(lastPublished()));
    expect(before.body.equals(stored(id) ?? Buffer.alloc(0))).toBe(true);

    rig.sync.standIn.directory.update(3);
    expect((await rig.sync.sync()).status).toBe('succeeded');
    const after = await get(id);
    expect(after.headers[SOURCE_HEADERS.runId]).toBe(String(lastPublished()));
    expect(after.headers[SOURCE_HEADERS.runId]).not.toBe(before.headers[SOURCE_HEADERS.runId]);
    expect(after.body.equals(stored(id) ?? Buffer.alloc(0))).toBe(true);
    expect(after.body.equals(before.body)).toBe(false);
  });

  it('carries a change to the freshness that touches no run (a restore noted in the lineage)', async () => {
    const id = clientIdAt(4);
    expect((await get(id)).headers[SOURCE_HEADERS.restoredAt]).toBeUndefined();
    const at = '2026-11-28T10:00:00.000Z';
    rig.sync.db
      .prepare(`INSERT INTO mirror_lineage (event, at, backup_at, backup_cursor) VALUES ('restore', ?, ?, 0)`)
      .run(at, '2026-11-28T09:00:00.000Z');
    expect((await get(id)).headers[SOURCE_HEADERS.restoredAt]).toBe(at);
  });

  it('sends a record byte for byte as stored: non-ASCII, holding U+FFFD, or not valid UTF-8', async () => {
    const cases: Array<[number, Buffer]> = [
      [5, Buffer.from('{"client_user_id":"ünïcødé 用户","note":"é"}')],
      [6, Buffer.from('{"note":"\uFFFD as sent"}')],
      [7, Buffer.concat([Buffer.from('{"note":"'), Buffer.from([0xff, 0xc3, 0x28, 0xed, 0xa0, 0x80]), Buffer.from('"}')])],
    ];
    const write = rig.sync.db.prepare<[Buffer, string]>('UPDATE users SET raw = CAST(? AS TEXT) WHERE client_user_id = ?');
    for (const [i, bytes] of cases) write.run(bytes, clientIdAt(i));
    for (const [i, bytes] of cases) {
      const res = await get(clientIdAt(i));
      expect(res.status, String(i)).toBe(200);
      expect(res.headers['content-length'], String(i)).toBe(String(bytes.length));
      expect(res.body.toString('hex'), String(i)).toBe(bytes.toString('hex'));
    }
  });
});

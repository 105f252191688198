/**
 * Error bodies of every shape a service or a proxy sends become a readable
 * HttpError message: never "[object Object]", never a throw while reading it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceClient } from '../src/service/client.js';
import { HttpError } from '../src/service/errors.js';
import { recordingServer, type CannedServer } from './support/canned-server.js';

const BODIES: Record<string, string> = {
  null: '{"detail":null}',
  number: '{"detail":42}',
  boolean: '{"detail":false}',
  string: '{"detail":"down for maintenance"}',
  'empty-string': '{"detail":""}',
  'error-object': '{"detail":{"error_type":"provider_error","error_message":"Oura is down"}}',
  'other-object': '{"detail":{"reason":{"nested":[1,2]}}}',
  fastapi: JSON.stringify({
    detail: [
      { loc: ['path', 'client_user_id'], msg: 'String should have at least 1 character', type: 'string_too_short' },
      {
        loc: ['query', 'limit', 0],
        msg: 'Input should be less than or equal to 500',
        type: 'less_than_equal',
        input: 501,
        ctx: { le: 500 },
      },
    ],
  }),
  'fastapi-no-msg': JSON.stringify({ detail: [{ loc: ['body', 3], type: 'missing' }, { loc: ['query'] }, { input: 1 }] }),
  'odd-list': JSON.stringify({ detail: ['plain words', 7, null, { loc: [null], msg: 'odd loc' }] }),
  'empty-list': '{"detail":[]}',
  'no-detail': '{}',
  'array-body': '[1,2]',
  html: '<html><body>502 Bad Gateway</body></html>',
  empty: '',
};

const EXPECTED: Record<string, string> = {
  null: ': detail null',
  number: ': detail 42',
  boolean: ': detail false',
  string: ': down for maintenance',
  'empty-string': ': (empty detail)',
  'error-object': ': provider_error: Oura is down',
  'other-object': ': {"reason":{"nested":[1,2]}}',
  fastapi: ': path.client_user_id: String should have at least 1 character; query.limit.0: Input should be less than or equal to 500',
  'fastapi-no-msg': ': body.3: missing; query: invalid; {"input":1}',
  'odd-list': ': plain words; detail 7; detail null; null: odd loc',
  'empty-list': ': (empty detail list)',
  'no-detail': ' (no detail in the body)',
  'array-body': ' (body is JSON but not an object)',
  html: ' (body is not JSON)',
  empty: ' (empty body)',
};

let srv: CannedServer;
let client: ServiceClient;

beforeAll(async () => {
  srv = await recordingServer((path) => ({ status: 422, body: BODIES[path.split('/').pop() ?? ''] ?? '' }));
  client = new ServiceClient({ baseUrl: srv.url, apiKey: 'pk_test' });
});
afterAll(async () => {
  await client?.close();
  srv.server.close();
});

describe('HttpError messages', () => {
  it.each(Object.keys(BODIES))('detail shape %s reads well', async (shape) => {
    const err = await client.resolveUser(shape).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HttpError);
    const message = (err as HttpError).message;
    expect(message).toBe(`GET /v2/user/resolve/${shape} -> HTTP 422${EXPECTED[shape] ?? '?'}`);
    expect(message).not.toContain('[object');
  });

  it('clips a long detail to one line', async () => {
    const long = new HttpError(500, 'GET', '/x', `line one\nline two ${'x'.repeat(1_000)}`, undefined);
    expect(long.message).not.toContain('\n');
    expect(long.message.length).toBeLessThan(400);
  });
});

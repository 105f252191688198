/**
 * Conformance: the service's official SDK (@tryvital/vital-node, pinned in
 * devDependencies) as a client of the stand-in. The SDK validates every
 * response against its own schema and refuses a whole page over one record
 * that lacks a required key, so it is an independent check that the
 * stand-in's default records have the shape the live service sends today.
 */
import { VitalClient, VitalError } from '@tryvital/vital-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { clientUserIdFor, userKeys } from '../src/stand-in/user-generator.js';
import { connectedSourcesOf, legacyShapes } from './support/legacy-shapes.js';
import { getPage } from './support/stand-in-http.js';

/** The header the SDK sends its key in; the stand-in takes any name it is given. */
const SDK_KEY_HEADER = 'x-vital-api-key';
const USERS = 1200;
const SEED = 8;
/** Enough generated users that every awkward suffix shows up (1 in ~500 ids is awkward). */
const WIDE_USERS = 40_000;

/** Characters a client must encode in a path segment, each of which some generated id must contain. */
const AWKWARD_CHARACTERS: ReadonlyArray<[string, RegExp]> = [
  ['slash', /\//],
  ['question mark', /\?/],
  ['percent', /%/],
  ['space', / /],
  ['non-ASCII', /[^\p{ASCII}]/u],
];

function sdkFor(s: StandIn): VitalClient {
  return new VitalClient({ apiKey: s.apiKey, baseUrl: s.baseUrl, maxRetries: 0 });
}

describe('the official SDK against the default stand-in', () => {
  let s: StandIn;
  let sdk: VitalClient;
  beforeAll(async () => {
    s = await startStandIn({ port: 0, users: USERS, seed: SEED, apiKeyHeader: SDK_KEY_HEADER });
    sdk = sdkFor(s);
  });
  afterAll(() => s.close());

  it('user.getAll pages the whole directory without error and sees every user once', async () => {
    const seen: string[] = [];
    for (let offset = 0; ; offset += 500) {
      const page = await sdk.user.getAll({ offset, limit: 500 });
      expect(page).toMatchObject({ total: USERS, offset, limit: 500 });
      for (const user of page.users) {
        expect(user.createdOn).toBeInstanceOf(Date);
        for (const source of user.connectedSources) expect(source.provider.slug).toBe(source.source.slug);
      }
      seen.push(...page.users.map((u) => u.userId));
      if (page.users.length < 500) break;
    }
    expect(seen).toHaveLength(USERS);
    expect(new Set(seen).size).toBe(USERS);
    expect(seen).toEqual([...s.directory.userIds()]);
  });

  it("user.getByClientUserId resolves plain ids, and an unknown id is the SDK's 404 error", async () => {
    const [first] = s.directory.page(0, 1);
    const user = await sdk.user.getByClientUserId(String(first?.client_user_id));
    expect(user.userId).toBe(first?.user_id);
    const missing = await sdk.user.getByClientUserId('cu_nobody/at all?%').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(missing).toBeInstanceOf(VitalError);
    expect((missing as VitalError).statusCode).toBe(404);
  });
});

describe('the official SDK and awkward client ids', () => {
  let s: StandIn;
  beforeAll(async () => {
    s = await startStandIn({ port: 0, users: WIDE_USERS, seed: SEED, apiKeyHeader: SDK_KEY_HEADER });
  });
  afterAll(() => s.close());

  it('resolves ids containing /, ?, %, spaces and non-ASCII text', async () => {
    const keys = userKeys(SEED);
    const ids = Array.from({ length: WIDE_USERS }, (_, i) => clientUserIdFor(keys, i)).filter((id) => encodeURIComponent(id) !== id);
    for (const [name, pattern] of AWKWARD_CHARACTERS)
      expect(
        ids.some((id) => pattern.test(id)),
        name,
      ).toBe(true);
    const sdk = sdkFor(s);
    for (const id of ids) {
      const user = await sdk.user.getByClientUserId(id);
      expect(user.clientUserId).toBe(id);
      expect(user.userId).toBe(s.directory.byClientUserId(id)?.user_id);
    }
  });
});

describe('legacy records, only on request', () => {
  let s: StandIn;
  beforeAll(async () => {
    s = await startStandIn({ port: 0, users: 2000, seed: SEED, apiKeyHeader: SDK_KEY_HEADER, legacyRecords: 0.3 });
  });
  afterAll(() => s.close());

  it('appear in about the share asked for, and the SDK refuses the pages that hold them', async () => {
    const users = [...(await getPage(s, 0, 500)).users, ...(await getPage(s, 500, 500)).users];
    const share = users.filter((u) => legacyShapes(u).length > 0).length / users.length;
    expect(share).toBeGreaterThan(0.24);
    expect(share).toBeLessThan(0.36);
    expect(users.some((u) => !('created_on' in u))).toBe(true);
    expect(users.some((u) => connectedSourcesOf(u).some((c) => c.provider === undefined))).toBe(true);
    await expect(sdkFor(s).user.getAll({ offset: 0, limit: 500 })).rejects.toThrow(/Missing required key "created_on"/);
  });
});

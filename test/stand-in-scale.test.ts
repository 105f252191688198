import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserSchema } from '../src/service/schemas.js';
import { startStandIn, type StandIn } from '../src/stand-in/index.js';
import { getPage } from './support/stand-in-http.js';

/** A real full GC, so heap numbers reflect what is retained, not garbage not yet collected. */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
}

let s: StandIn;
beforeAll(async () => {
  s = await startStandIn({ users: 1_000_000, seed: 1, requestLogSize: 1000 });
});
afterAll(() => s.close());

describe('a million-user directory', () => {
  it('serves the last page directly, without walking the directory', async () => {
    const page = await getPage(s, 999_500, 500);
    expect(page).toMatchObject({ total: 1_000_000, offset: 999_500, limit: 500 });
    expect(page.users).toHaveLength(500);
    expect(page.users.every((u) => UserSchema.safeParse(u).success)).toBe(true);
    expect(page.users.at(-1)).toEqual([...s.directory.page(999_999, 1)][0]);
  });

  it('finds positions past deletions without materializing the list', async () => {
    const doomed = Array.from({ length: 2000 }, (_, k) => k * 499);
    expect(s.directory.delete(doomed)).toBe(2000);
    const page = await getPage(s, 997_500, 500);
    expect(page.total).toBe(998_000);
    expect(page.users).toHaveLength(500);
    expect(page.users[0]?.user_id).toBe(s.directory.page(997_500, 1)[0]?.user_id);
  });

  it('keeps memory flat while serving 200 pages of 500', async () => {
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    for (let p = 0; p < 200; p++) {
      const page = await getPage(s, p * 4_990, 500);
      expect(page.users).toHaveLength(500);
    }
    collectGarbage();
    const grown = process.memoryUsage().heapUsed - before;
    expect(grown).toBeLessThan(50 * 1024 * 1024);
  });
});

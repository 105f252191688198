/**
 * Offline lookups by client_user_id on a mirror file built from the
 * stand-in's users (seeded keys): the reader side that both layout benches
 * report. Each answer must be the asked user's record, so a fast wrong
 * answer cannot pass.
 */
import Database from 'better-sqlite3';
import { Prng } from '../src/stand-in/random.js';
import { clientUserIdFor, userIdFor, type UserKeys } from '../src/stand-in/user-generator.js';

/** Lookups per second over `lookups` random users of the first `users`. */
export function clientIdLookupsPerSecond(path: string, keys: UserKeys, users: number, lookups: number): number {
  const reader = new Database(path, { readonly: true });
  try {
    const get = reader.prepare<[string], string>(`SELECT raw FROM users WHERE client_user_id = ?`).pluck();
    const prng = new Prng(7, 3);
    const wanted = Array.from({ length: lookups }, () => Math.floor(prng.float() * users));
    const clients = wanted.map((i) => clientUserIdFor(keys, i));
    const ids = wanted.map((i) => userIdFor(keys, i));
    const started = performance.now();
    for (let n = 0; n < lookups; n++) {
      if (!(get.get(clients[n] ?? '') ?? '').includes(`"user_id":"${ids[n]}"`)) throw new Error(`lookup of ${clients[n]} missed`);
    }
    return lookups / ((performance.now() - started) / 1000);
  } finally {
    reader.close();
  }
}

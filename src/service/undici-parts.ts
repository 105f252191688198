/**
 * The parts of undici the service client uses, loaded by themselves:
 * undici's index loads all of undici (fetch, WebSocket, the caches, the
 * mock agent...), 42 ms more CPU at every start of a sync than these alone
 * (with the compile cache; paired whole processes, bench/README.md,
 * "Start-up"). undici declares no `exports` map, so its files are its
 * layout. Its index does one thing besides loading: it gives every
 * dispatcher the `request` API (lib/api), which is done here the same way.
 * test/undici-parts.test.ts holds, in a process that never loads the index,
 * that these are the index's own classes and that a request goes through:
 * an upgrade of undici that moves them fails there, not in a sync. Types
 * come from the index.
 */
import { createRequire } from 'node:module';
import type { Pool as UndiciPool, errors as UndiciErrors } from 'undici';

const require = createRequire(import.meta.url);

const dispatcher = require('undici/lib/dispatcher/dispatcher.js') as { prototype: Record<string, unknown> };
if (typeof dispatcher.prototype.request !== 'function') {
  Object.assign(dispatcher.prototype, require('undici/lib/api/index.js') as Record<string, unknown>);
}

export const Pool = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
export type Pool = UndiciPool;
export const undiciErrors = require('undici/lib/core/errors.js') as typeof UndiciErrors;

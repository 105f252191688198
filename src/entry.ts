/**
 * What the bin `user-mirror` (dist/cli.js) runs: it refuses an unsupported
 * Node with one line before the dispatcher, or anything it loads, is even
 * parsed (better-sqlite3 13 would segfault on Node 20, undici 8 throw).
 */
import { refuseUnsupportedNode } from './runtime/supported-node.js';

refuseUnsupportedNode();
await import('./cli.js');

/**
 * The content hash: how the sync tells a changed record from an unchanged
 * one without parsing it. Stored in `users.content_hash` and compared by the
 * run's ledger (run-ledger.ts).
 *
 * SHA-256 (not a weaker hash) because with SHA extensions it is the fastest
 * digest node offers; collisions are not the concern, speed is: it runs for
 * every record of every sync. Over the record's UTF-8 bytes: the same digest
 * for the received bytes and for the string they decode to. The mapping's
 * version (ROW_FORMAT) tags the digest, so a new mapping makes every stored
 * hash differ and the next sync rewrites every row; the tag is prepended to
 * the digest, not to the input, so the (long) record is never copied.
 */
import { hash } from 'node:crypto';
import { ROW_FORMAT } from '../../db/user-row.js';

export function contentHash(record: string | Uint8Array): string {
  return `${ROW_FORMAT}:${hash('sha256', record, 'base64url')}`;
}

/**
 * A page decoded whole, for tests that look at one page's outcome: the sync
 * itself takes a page's writes one at a time (pageWrites in
 * src/sync/page-decode.ts).
 */
import type { UserWrite } from '../../db/user-writes.js';
import {
  DEFAULT_MAX_RECORD_BYTES,
  emptyTally,
  pageWrites,
  type PageBytes,
  type PageTally,
  type Sight,
} from '../../src/sync/page-decode.js';

/** A page decoded whole: its writes and its tally. */
export interface DecodedPage extends PageTally {
  /** New, changed or reappearing users, and repeat listings (the directory moved under the scan). */
  writes: UserWrite[];
}

/** The whole page at once (pageWrites, collected). */
export function decodePage(page: PageBytes, offset: number, sight: Sight, maxRecordBytes: number = DEFAULT_MAX_RECORD_BYTES): DecodedPage {
  const tally = emptyTally();
  const writes = [...pageWrites(page, offset, sight, tally, maxRecordBytes)];
  return { writes, ...tally };
}

/**
 * Splits one fetched page into what the writer stages and what it sets aside.
 * Pure. Each raw record is serialised exactly once, here: that string is both
 * what the mirror keeps and what it compares to spot an unchanged user, so
 * nothing downstream needs to serialise it again.
 */
import type { UserPage } from '../service/client.js';
import type { RejectedRecordInput, StagedRecord } from '../../db/mirror-writer.js';

export interface SplitPage {
  staged: StagedRecord[];
  rejected: RejectedRecordInput[];
}

export function splitPage(page: UserPage, offset: number): SplitPage {
  const staged: StagedRecord[] = [];
  const rejected: RejectedRecordInput[] = [];
  for (const record of page.records) {
    if (record.ok) staged.push({ user: record.user, rawJson: JSON.stringify(page.raw[record.index]), warnings: record.warnings });
    else rejected.push({ offset, index: record.index, reason: record.reason, raw: record.raw });
  }
  return { staged, rejected };
}

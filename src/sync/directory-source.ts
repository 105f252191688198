/**
 * What the sync needs from the service: list pages, and resolve one user to
 * check a deletion candidate. ServiceClient satisfies it; naming the two
 * methods keeps the engine testable against anything that speaks them.
 */
import type { PageParams, RecordPage, ResolveResult } from '../service/client.js';

export interface DirectorySource {
  listUserRecords(params: PageParams, signal?: AbortSignal): Promise<RecordPage>;
  resolveUser(clientUserId: string, signal?: AbortSignal): Promise<ResolveResult>;
}

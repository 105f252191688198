/**
 * What the sync needs from the service: list pages, and resolve one user to
 * check a deletion candidate. ServiceClient satisfies it; naming the two
 * methods keeps the engine testable against anything that speaks them.
 */
import type { PageParams, ResolveResult, UserPage } from '../service/client.js';

export interface DirectorySource {
  listUsersPage(params: PageParams, signal?: AbortSignal): Promise<UserPage>;
  resolveUser(clientUserId: string, signal?: AbortSignal): Promise<ResolveResult>;
}

/**
 * The service's directory in memory, speaking DirectorySource: list pages
 * as the bytes the client would have received (cut by the same record
 * scanner), and resolve. For the engine's decision tests, which need no
 * HTTP; the HTTP path has its own tests against the stand-in.
 */
import { scanRecordSpans } from '../../src/service/page-spans.js';
import { parseUserRecord } from '../../src/service/user-record.js';
import { NetworkError } from '../../src/service/errors.js';
import type { PageParams, RecordPage, ResolveResult } from '../../src/service/client.js';
import type { DirectorySource } from '../../src/sync/source.js';
import type { WireRecord } from './mirror-fixtures.js';

export class MemoryDirectory implements DirectorySource {
  /** Offsets whose list request fails (a network error), every time. */
  readonly failingOffsets = new Set<number>();
  /** client_user_ids whose resolve fails, every time. */
  readonly failingResolves = new Set<string>();
  /** Users the listing skips (a listing that moved), though they still resolve. */
  readonly hiddenFromListing = new Set<string>();
  listRequests = 0;
  resolveRequests = 0;
  /** Resolves in flight now, and the most there ever were at once. */
  resolvesInFlight = 0;
  maxResolvesInFlight = 0;

  constructor(public users: WireRecord[]) {}

  async listUserRecords(params: PageParams, _signal?: AbortSignal): Promise<RecordPage> {
    await Promise.resolve();
    this.listRequests++;
    const { offset, limit } = params;
    if (this.failingOffsets.has(offset)) throw new NetworkError('ECONNRESET', 'GET', '/v2/user/');
    const listed = this.users.filter((u) => !this.hiddenFromListing.has(String(u.client_user_id)));
    const body = Buffer.from(JSON.stringify({ users: listed.slice(offset, offset + limit), total: listed.length, offset, limit }));
    const scan = scanRecordSpans(body);
    if (!scan.ok) throw new Error(scan.reason);
    return { total: listed.length, offset, limit, unknownKeys: [], body, spans: scan.spans };
  }

  async resolveUser(clientUserId: string, _signal?: AbortSignal): Promise<ResolveResult> {
    this.resolvesInFlight++;
    this.maxResolvesInFlight = Math.max(this.maxResolvesInFlight, this.resolvesInFlight);
    try {
      return await this.resolveNow(clientUserId);
    } finally {
      this.resolvesInFlight--;
    }
  }

  private async resolveNow(clientUserId: string): Promise<ResolveResult> {
    // A tick, so that concurrent checks overlap as they would over the network.
    await new Promise((resolve) => setTimeout(resolve, 1));
    this.resolveRequests++;
    if (this.failingResolves.has(clientUserId)) throw new NetworkError('ECONNRESET', 'GET', '/v2/user/resolve');
    const raw = this.users.find((u) => u.client_user_id === clientUserId);
    if (raw === undefined) return { found: false };
    const parsed = parseUserRecord(raw, 0);
    if (!parsed.ok) throw new Error(parsed.reason);
    return { found: true, user: parsed.user, rawJson: JSON.stringify(raw), warnings: parsed.warnings };
  }
}

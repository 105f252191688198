/**
 * Organizations and their members, for `DELETE /v1/org/{org}/member/{member}`,
 * with the per-pair counters tests use to prove removals are idempotent.
 * Ids are compared lowercased, as the live service parses them into UUIDs.
 */
import { Prng, randomUuid, seedKey } from './random.js';

export interface OrgMember {
  orgId: string;
  memberId: string;
}

export interface MembersOptions {
  seed: number;
  orgs: number;
  membersPerOrg: number;
}

const ORG_STREAM = 21;

export class Members {
  private readonly byOrg = new Map<string, Set<string>>();
  private readonly calls = new Map<string, number>();
  private readonly effective = new Map<string, number>();

  constructor(options: MembersOptions) {
    const prng = new Prng(seedKey(options.seed), ORG_STREAM);
    for (let o = 0; o < options.orgs; o++) {
      const orgId = randomUuid(prng);
      for (let m = 0; m < options.membersPerOrg; m++) this.add(orgId, randomUuid(prng));
    }
  }

  add(orgId: string, memberId: string): void {
    const org = orgId.toLowerCase();
    const members = this.byOrg.get(org) ?? new Set<string>();
    members.add(memberId.toLowerCase());
    this.byOrg.set(org, members);
  }

  has(orgId: string, memberId: string): boolean {
    return this.byOrg.get(orgId.toLowerCase())?.has(memberId.toLowerCase()) ?? false;
  }

  /** Current members, orgs in creation order. */
  list(): OrgMember[] {
    return [...this.byOrg].flatMap(([orgId, members]) => [...members].map((memberId) => ({ orgId, memberId })));
  }

  orgIds(): string[] {
    return [...this.byOrg.keys()];
  }

  /** Counts an authenticated DELETE for the pair, whatever its outcome. */
  recordDeleteCall(orgId: string, memberId: string): void {
    bump(this.calls, pairKey(orgId, memberId));
  }

  /** Removes the member; true when it existed (the request gets a 200). */
  remove(orgId: string, memberId: string): boolean {
    const removed = this.byOrg.get(orgId.toLowerCase())?.delete(memberId.toLowerCase()) ?? false;
    if (removed) bump(this.effective, pairKey(orgId, memberId));
    return removed;
  }

  deleteCalls(orgId: string, memberId: string): number {
    return this.calls.get(pairKey(orgId, memberId)) ?? 0;
  }

  /** How many DELETEs for the pair actually removed it (0 or 1, unless it was re-added). */
  effectiveDeletes(orgId: string, memberId: string): number {
    return this.effective.get(pairKey(orgId, memberId)) ?? 0;
  }

  totalDeleteCalls(): number {
    let total = 0;
    for (const n of this.calls.values()) total += n;
    return total;
  }
}

function pairKey(orgId: string, memberId: string): string {
  return `${orgId.toLowerCase()} ${memberId.toLowerCase()}`;
}

function bump(counter: Map<string, number>, key: string): void {
  counter.set(key, (counter.get(key) ?? 0) + 1);
}

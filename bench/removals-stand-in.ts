/**
 * The stand-in for the removal benchmark, in a child process of its own so
 * it does not share a CPU with the worker's event loop. Driven over IPC by
 * bench/removals.ts: add members, set faults, report per-member effective
 * deletes (the exactly-once check).
 */
import { startStandIn, type FaultPlan } from '../src/stand-in/index.js';
import { errorMessage } from '../src/runtime/line-text.js';

export type StandInRequest =
  | { id: number; op: 'add'; members: Array<[string, string]> }
  | { id: number; op: 'faults'; plan: Partial<FaultPlan> }
  | { id: number; op: 'check'; members: Array<[string, string]> }
  | { id: number; op: 'close' };

export interface CheckReport {
  /** Members whose effective delete count is not exactly 1. */
  notExactlyOnce: number;
  stillPresent: number;
  deleteCalls: number;
  statuses: Record<string, number>;
}

export type StandInReply =
  | { ready: true; managementUrl: string; managementKey: string }
  | { id: number; ok: true; report?: CheckReport }
  | { id: number; ok: false; error: string };

const standIn = await startStandIn({ users: 0, orgs: 0, membersPerOrg: 0, seed: 11, requestLogSize: 1 });
const send = (reply: StandInReply): void => {
  process.send?.(reply);
};

process.on('message', (raw: unknown) => {
  const msg = raw as StandInRequest;
  try {
    switch (msg.op) {
      case 'add':
        for (const [org, member] of msg.members) standIn.members.add(org, member);
        send({ id: msg.id, ok: true });
        return;
      case 'faults':
        standIn.faults.clear();
        standIn.faults.set(msg.plan);
        standIn.counts.clear();
        send({ id: msg.id, ok: true });
        return;
      case 'check': {
        let notExactlyOnce = 0;
        let stillPresent = 0;
        for (const [org, member] of msg.members) {
          if (standIn.members.effectiveDeletes(org, member) !== 1) notExactlyOnce++;
          if (standIn.members.has(org, member)) stillPresent++;
        }
        const statuses: Record<string, number> = {};
        for (const [key, n] of Object.entries(standIn.counts.snapshot())) {
          if (key.startsWith('delete-member ')) statuses[key.slice('delete-member '.length)] = n;
        }
        send({ id: msg.id, ok: true, report: { notExactlyOnce, stillPresent, deleteCalls: standIn.members.totalDeleteCalls(), statuses } });
        return;
      }
      case 'close':
        void standIn.close().then(() => {
          send({ id: msg.id, ok: true });
          process.exit(0);
        });
        return;
    }
  } catch (err) {
    send({ id: msg.id, ok: false, error: errorMessage(err) });
  }
});
process.on('disconnect', () => process.exit(0));

send({ ready: true, managementUrl: standIn.managementUrl, managementKey: standIn.managementKey });

/**
 * The stand-in for the sync benchmark, in a child process of its own so that
 * serving a million users does not share a CPU with the sync under test.
 * Driven over IPC by bench/sync.ts.
 */
import { startStandIn, type FaultPlan } from '../src/stand-in/index.js';

export type SyncStandInRequest = { op: 'faults'; plan: Partial<FaultPlan> } | { op: 'close' };

export interface SyncStandInReady {
  ready: true;
  baseUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  users: number;
}

const users = Number(process.argv[2] ?? '1000');
/** `compress`: answers compressed for clients that ask (the bandwidth scenario); otherwise plain. */
const compress = process.argv[3] === 'compress';
// The key travels in the header the official SDK sends (x-vital-api-key), so
// that the SDK peer and our client (told the header) call the same stand-in.
// Plain bytes but for the bandwidth scenario: over loopback, compression only costs CPU, and every
// peer asks for it (fetch does by itself), so the loopback scenarios stay what they measured before.
const standIn = await startStandIn({
  users,
  seed: 2024,
  orgs: 0,
  membersPerOrg: 0,
  requestLogSize: 1,
  apiKeyHeader: 'x-vital-api-key',
  compress,
});

process.on('message', (raw: unknown) => {
  const msg = raw as SyncStandInRequest;
  if (msg.op === 'faults') {
    standIn.faults.set(msg.plan);
    process.send?.({ ok: true });
  } else {
    void standIn.close().then(() => process.exit(0));
  }
});
process.on('disconnect', () => void standIn.close().then(() => process.exit(0)));

const ready: SyncStandInReady = {
  ready: true,
  baseUrl: standIn.baseUrl,
  apiKey: standIn.apiKey,
  apiKeyHeader: standIn.apiKeyHeader,
  users: standIn.directory.size,
};
process.send?.(ready);

/**
 * A removal is one trace, across two processes, at a real OTLP/HTTP
 * receiver: `user-mirror remove-member` (the producer) and `user-mirror
 * worker removals` (the consumer), each exporting JSON to the receiver,
 * against the stand-in's management endpoint and a private redis-server.
 * The first DELETE answers 503, so the job runs twice: both attempts are
 * spans under the producer's, each with its DELETE and audit writes. No
 * span carries a member, an org, a requester, a reason or a key.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRig, startShared, type Rig, type Shared } from './support/removal-rig.js';
import { requireBuiltCli, runCli, startCli, type CliProcess } from './support/cli-process.js';
import { eventually } from './support/eventually.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from './support/otlp-receiver.js';

const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;

let shared: Shared;
let rig: Rig;
let receiver: OtlpReceiver;
let worker: CliProcess | undefined;

beforeAll(async () => {
  requireBuiltCli('src/commands/worker.js', 'src/commands/remove-member.js', 'src/runtime/tracing-sdk.js');
  shared = await startShared();
  rig = await createRig(shared);
  receiver = await startOtlpReceiver();
});
afterAll(async () => {
  if (worker !== undefined && worker.child.exitCode === null) worker.child.kill('SIGKILL');
  await rig?.close();
  await shared?.close();
  await receiver?.close();
});

const traced = (service: string): Record<string, string> => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  OTEL_SERVICE_NAME: service,
});

describe('a removal traced across the CLI and the worker', () => {
  it('is one trace: producer span, an attempt span per run under it, DELETE and audit spans in each attempt', async () => {
    worker = startCli(['worker', 'removals'], rig.env({ ...traced('removal-worker'), REMOVAL_BACKOFF_MS: '50' }));
    await worker.line(/removal worker started/, 90_000);
    const m = rig.member();
    rig.standIn.faults.failNext({ method: 'DELETE', status: 503 });

    const cli = await runCli(
      ['remove-member', m.org_id, m.member_id, '--reason', 'left the org'],
      rig.env({ ...traced('remove-member-cli'), REMOVAL_BACKOFF_MS: '50' }),
      90_000,
    );
    expect(cli.code, cli.stderr).toBe(0);
    const jobId = /^job (\S+): queued/m.exec(cli.stdout)?.[1] ?? '';
    await rig.finished(jobId, 90_000);
    expect(rig.standIn.members.has(m.org_id, m.member_id)).toBe(false);

    // The worker's batch goes out within its 5 s schedule; SIGTERM flushes what is left.
    worker.child.kill('SIGTERM');
    expect(await worker.exited(90_000)).toBe(0);

    const producer = await eventually(
      () => receiver.spans.find((s) => s.kind === PRODUCER && s.service === 'remove-member-cli'),
      90_000,
      'the producer span at the receiver',
    );
    const inTrace = (): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === producer.traceId);
    const attempts = await eventually(
      () => {
        const a = inTrace().filter((s) => s.kind === CONSUMER);
        return a.length === 2 ? a : undefined;
      },
      90_000,
      'two attempt spans in the producer trace',
    );
    expect(producer.attributes['messaging.message.id']).toBe(jobId);
    for (const a of attempts) {
      expect(a.service).toBe('removal-worker');
      expect(a.parentSpanId).toBe(producer.spanId);
      expect(a.attributes['messaging.message.id']).toBe(jobId);
    }
    expect(attempts.map((a) => a.attributes['user_mirror.attempt']).sort()).toEqual([1, 2]);

    const children = (parent: ReceivedSpan): ReceivedSpan[] => inTrace().filter((s) => s.parentSpanId === parent.spanId);
    const byAttempt = new Map(attempts.map((a) => [a.attributes['user_mirror.attempt'], children(a)]));
    const first = byAttempt.get(1) ?? [];
    const second = byAttempt.get(2) ?? [];
    const deleteOf = (spans: ReceivedSpan[]) => spans.find((s) => s.kind === CLIENT && s.name === 'DELETE');
    expect(deleteOf(first)?.attributes).toMatchObject({ 'http.request.method': 'DELETE', 'http.response.status_code': 503 });
    expect(deleteOf(second)?.attributes).toMatchObject({ 'http.request.method': 'DELETE', 'user_mirror.outcome': 'deleted' });
    expect(deleteOf(second)?.attributes['server.address']).toBe(new URL(rig.standIn.managementUrl).host);
    const audits = (spans: ReceivedSpan[]) => spans.filter((s) => s.name === 'removal audit').map((s) => s.attributes['user_mirror.audit']);
    expect(audits(first)).toEqual(['started', 'attempt_failed']);
    expect(audits(second)).toEqual(['started', 'finished']);

    // Never a member, an org, the reason or the management key: not in any span, not anywhere in what was sent.
    const sent = receiver.bodies.join('\n');
    for (const secret of [m.org_id, m.member_id, 'left the org', rig.standIn.managementKey]) expect(sent).not.toContain(secret);
  });
});

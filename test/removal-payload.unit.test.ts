import { describe, expect, it } from 'vitest';
import {
  MAX_REASON,
  REMOVE_MEMBER_JOB,
  checkRemovalJob,
  checkRemovalPayload,
  removalDedupId,
  removalJobOptions,
  removalQueueName,
} from '../jobs/removals/contract.js';
import { UnreadableJob } from '../jobs/unreadable-job.js';
import { canonicalUrl, urlTarget } from '../jobs/url-target.js';

const ORG = '3f6c1a52-8a3e-4b8e-9d2a-0c6f7e1b2a90';
const MEMBER = '9b2d4e61-1c7f-4a0b-8e3d-5f6a7b8c9d0e';
const PRODUCTION = urlTarget('https://management.example.com');
const SANDBOX = urlTarget('https://management.sandbox.example.com');
const T = PRODUCTION.id;

describe('management target', () => {
  it('is one id for every spelling of one service, and never carries credentials', () => {
    const spellings = [
      'https://Management.Example.com',
      'https://management.example.com:443/',
      'https://ops:s3cret@management.example.com/?x=1#y',
    ];
    for (const url of spellings) expect(urlTarget(url)).toEqual(PRODUCTION);
    expect(PRODUCTION.id).toMatch(/^[0-9a-f]{16}$/);
    expect(PRODUCTION.url).toBe('https://management.example.com');
    expect(canonicalUrl('https://ops:s3cret@m.example.com/base//')).toBe('https://m.example.com/base');
  });

  it('differs between environments, ports and paths', () => {
    const ids = new Set(
      [
        'https://management.example.com',
        'https://management.sandbox.example.com',
        'https://management.example.com:8443',
        'https://management.example.com/eu',
        'http://management.example.com',
      ].map((u) => urlTarget(u).id),
    );
    expect(ids.size).toBe(5);
  });

  it('names a queue BullMQ accepts (no colon)', () => {
    expect(removalQueueName(T)).toBe(`member-removals-${T}`);
    expect(removalQueueName(T)).not.toContain(':');
  });
});

describe('checkRemovalJob', () => {
  it('accepts a job for its own target', () => {
    expect(checkRemovalJob(REMOVE_MEMBER_JOB, { target: T, org_id: ORG, member_id: MEMBER }, PRODUCTION)).toMatchObject({ ok: true });
  });

  it('refuses a job for another target, naming both and no key', () => {
    const r = checkRemovalJob(REMOVE_MEMBER_JOB, { target: T, org_id: ORG, member_id: MEMBER }, SANDBOX);
    expect(r).toMatchObject({ ok: false, wrongTarget: true });
    if (!r.ok) {
      expect(r.reason).toContain(T);
      expect(r.reason).toContain(SANDBOX.id);
      expect(r.reason).toContain(SANDBOX.url);
    }
  });

  it('refuses a job that names no target (an older producer)', () => {
    const r = checkRemovalJob(REMOVE_MEMBER_JOB, { org_id: ORG, member_id: MEMBER }, PRODUCTION);
    expect(r).toMatchObject({ ok: false });
    if (!r.ok) expect(r.reason).toMatch(/target: is required/);
  });

  it('refuses an unreadable job with its reason', () => {
    const r = checkRemovalJob(REMOVE_MEMBER_JOB, new UnreadableJob(['job opts is not JSON (3 bytes)']), PRODUCTION);
    expect(r).toEqual({ ok: false, reason: 'job opts is not JSON (3 bytes)' });
  });
});

describe('removal payload', () => {
  it('accepts ids and optional fields, and lower-cases ids', () => {
    const r = checkRemovalPayload({
      target: T,
      org_id: ORG.toUpperCase(),
      member_id: MEMBER,
      requested_by: 'ops:alice',
      reason: 'left\nthe org',
    });
    expect(r).toEqual({
      ok: true,
      payload: { target: T, org_id: ORG, member_id: MEMBER, requested_by: 'ops:alice', reason: 'left\nthe org' },
    });
  });

  it('treats null optional fields as absent (producers in other languages send them)', () => {
    const r = checkRemovalPayload({ target: T, org_id: ORG, member_id: MEMBER, requested_by: null, reason: null });
    expect(r).toEqual({ ok: true, payload: { target: T, org_id: ORG, member_id: MEMBER } });
  });

  const bad: Array<[string, unknown, RegExp]> = [
    ['missing member_id', { org_id: ORG }, /member_id: is required/],
    ['missing both', {}, /org_id: is required.*member_id: is required/],
    ['bad target', { target: 'production', org_id: ORG, member_id: MEMBER }, /target: must be a management target id/],
    ['number id', { org_id: 42, member_id: MEMBER }, /org_id: must be a UUID/],
    ['array payload', [ORG, MEMBER], /\(root\)/],
    ['string payload', 'remove everyone', /\(root\)/],
    ['null payload', null, /\(root\)/],
    ['extra field', { org_id: ORG, member_id: MEMBER, admin: true }, /unexpected field\(s\): "admin"/],
    ['slash in id', { org_id: `${ORG}/../x`, member_id: MEMBER }, /org_id: must be a UUID/],
    ['dot-dot id', { org_id: ORG, member_id: '..' }, /member_id: must be a UUID/],
    ['encoded slash', { org_id: ORG, member_id: `${MEMBER}%2F` }, /member_id: must be a UUID/],
    ['huge id', { org_id: 'a'.repeat(1_000_000), member_id: MEMBER }, /org_id: must be a UUID/],
    ['huge reason', { org_id: ORG, member_id: MEMBER, reason: 'x'.repeat(MAX_REASON + 1) }, /reason: must be at most/],
    ['empty requested_by', { org_id: ORG, member_id: MEMBER, requested_by: '' }, /requested_by: must not be empty/],
    ['control chars', { org_id: ORG, member_id: MEMBER, requested_by: 'a\u001b[31mb' }, /requested_by: must not contain control/],
    ['wrong type requested_by', { org_id: ORG, member_id: MEMBER, requested_by: 7 }, /requested_by/],
  ];
  it.each(bad)('rejects %s with a reason naming the field', (_name, data, reason) => {
    const r = checkRemovalPayload(typeof data === 'object' && data !== null && !Array.isArray(data) ? { target: T, ...data } : data);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.reason).toMatch(reason);
      // Never echoes a huge or hostile value back.
      expect(r.reason.length).toBeLessThan(500);
    }
  });

  it('shows hostile unknown keys short and escaped', () => {
    const r = checkRemovalPayload({ org_id: ORG, member_id: MEMBER, ['k\u001b'.repeat(100)]: 1 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).not.toContain('\u001b');
  });

  it('rejects a job with another name', () => {
    const r = checkRemovalJob('delete-everything', { target: T, org_id: ORG, member_id: MEMBER }, PRODUCTION);
    expect(r).toEqual({ ok: false, reason: `unknown job name (expected '${REMOVE_MEMBER_JOB}')` });
  });
});

describe('dedup id and job options', () => {
  it('is the same for the same pair whatever the case', () => {
    expect(removalDedupId({ org_id: ORG.toUpperCase(), member_id: MEMBER })).toBe(
      removalDedupId({ org_id: ORG, member_id: MEMBER.toUpperCase() }),
    );
    expect(removalDedupId({ org_id: ORG, member_id: MEMBER })).toBe(`member-removal:${ORG}:${MEMBER}`);
  });

  it('differs between members', () => {
    expect(removalDedupId({ org_id: ORG, member_id: MEMBER })).not.toBe(removalDedupId({ org_id: MEMBER, member_id: ORG }));
  });

  it('keeps failed jobs, retries with the removal backoff, deduplicates', () => {
    const opts = removalJobOptions({ org_id: ORG, member_id: MEMBER }, 'job-1', { attempts: 7, backoffMs: 250 });
    expect(opts).toMatchObject({
      jobId: 'job-1',
      attempts: 7,
      backoff: { type: 'removal', delay: 250 },
      deduplication: { id: `member-removal:${ORG}:${MEMBER}` },
      removeOnFail: false,
    });
  });
});

/**
 * The marker that stands in for a job BullMQ cannot read, and the checks
 * that recognise such a job. Pure: the queue contracts read the marker without
 * loading the BullMQ classes that put it there (./tolerant-bullmq.ts).
 */
import { isRecord } from '../src/runtime/is-record.js';

/**
 * What a job's data is when BullMQ cannot read the job: its `data`
 * is not JSON, or its `opts` (or `progress`, `parent`) are not, as written
 * by a producer in another language that built the job hash by hand. BullMQ
 * would throw before any processor runs, and the job would stay active and
 * be re-queued as stalled forever; with this marker in its place the
 * processor fails the job once, with a reason (see ./tolerant-bullmq.ts).
 *
 * The raw text is kept out of the reason on purpose: it may be huge or
 * hostile, and the reason ends up in logs, the audit and the terminal.
 */
export class UnreadableJob {
  constructor(readonly problems: readonly string[]) {}

  get reason(): string {
    return this.problems.join('; ');
  }
}

/** The fields of a job hash BullMQ parses as JSON, and what a reader gets in place of a bad one. */
export const JSON_FIELDS = { data: '{}', opts: '{}', progress: '0', parent: undefined } as const;
export type JsonField = keyof typeof JSON_FIELDS;

export function unreadableField(field: JsonField, raw: string): string {
  const bytes = Buffer.byteLength(raw);
  return field === 'data'
    ? `job data is not JSON (${bytes} bytes); a producer must send a JSON object`
    : `job ${field} is not JSON (${bytes} bytes); a producer must send JSON job options`;
}

/** Whether BullMQ could parse `raw` (an absent field reads as its default). */
export function isJson(raw: string | undefined): boolean {
  if (raw === undefined || raw === '') return true;
  try {
    JSON.parse(raw);
    return true;
  } catch {
    return false;
  }
}

/**
 * A quarantined job's data (./tolerant-bullmq.ts): the problems, in place of the
 * data, so every later reader (a retry, `removals --failed`) still knows why.
 */
export const QUARANTINE_KEY = '$unreadable';

/** The marker for data BullMQ would hand over, or undefined when it is ordinary data. */
export function unreadableFromData(raw: string | undefined): UnreadableJob | undefined {
  if (raw === undefined || raw === '') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return new UnreadableJob([unreadableField('data', raw)]);
  }
  if (!isRecord(parsed)) return undefined;
  const problems = parsed[QUARANTINE_KEY];
  if (Object.keys(parsed).length === 1 && Array.isArray(problems) && problems.every((p) => typeof p === 'string')) {
    return new UnreadableJob(problems);
  }
  return undefined;
}

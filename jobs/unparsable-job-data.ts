/**
 * What a removal job's data is when it is not JSON at all (a producer in
 * another language that wrote the job hash by hand, or a serialiser bug).
 * BullMQ would throw on it before any processor runs, and the job would
 * stay active and be re-queued as stalled forever; with this marker in its
 * place the processor fails the job once, with a reason (see tolerant-job.ts).
 *
 * The raw text is kept out on purpose: it may be huge or hostile, and the
 * reason ends up in logs, the audit and the terminal.
 */
export class UnparsableJobData {
  constructor(readonly bytes: number) {}

  get reason(): string {
    return `job data is not JSON (${this.bytes} bytes); a producer must send a JSON object`;
  }
}

/** The data BullMQ would parse, or the marker when it cannot be parsed. */
export function parseJobData(raw: string | undefined): { ok: true } | { ok: false; data: UnparsableJobData } {
  try {
    JSON.parse(raw || '{}');
    return { ok: true };
  } catch {
    return { ok: false, data: new UnparsableJobData(Buffer.byteLength(raw ?? '')) };
  }
}

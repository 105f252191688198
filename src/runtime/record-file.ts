/**
 * A small JSON record a scheduled job leaves in its folder (`last-backup.json`,
 * `last-export.json`) for `status` and `/metrics`: read as any outside
 * input, validated, and a record that cannot be read or does not parse is a
 * problem to report, not an exception.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';

export type RecordRead<T> = { ok: true; record: T | undefined } | { ok: false; problem: string };

/**
 * The record `file` in `dir`: undefined when there is none yet, or when the
 * file is blank (a page reserved before the first attempt, src/health/backup-folder.ts).
 */
export function readRecordFile<S extends z.ZodType>(dir: string, file: string, schema: S): RecordRead<z.output<S>> {
  let text: string;
  try {
    text = readFileSync(join(dir, file), 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' ? { ok: true, record: undefined } : { ok: false, problem: `${file}: cannot be read (${code})` };
  }
  if (text.trim() === '') return { ok: true, record: undefined };
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    if (parsed.success) return { ok: true, record: parsed.data };
    const issue = parsed.error.issues[0];
    return { ok: false, problem: `${file}: ${issue?.path.join('.') ?? ''} ${issue?.message ?? 'is invalid'}` };
  } catch {
    return { ok: false, problem: `${file}: not JSON` };
  }
}

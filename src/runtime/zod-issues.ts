/**
 * Zod issues the way an operator reads them: `users[37].user_id: Invalid
 * UUID`. Field paths only, never input values (an input may be a key). For
 * every validation whose failure a person reads: a user record, a page's
 * envelope, a job's data.
 */
import type { z } from 'zod';

/** `users[37].connected_sources[0].provider`, after `prefix`; `(root)` when both are empty. */
export function formatPath(path: ReadonlyArray<PropertyKey>, prefix = ''): string {
  let out = prefix;
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out === '' ? '(root)' : out;
}

/** Every issue as `path: message`, joined with `; `. */
export function formatIssues(issues: ReadonlyArray<z.core.$ZodIssue>, prefix = ''): string {
  return issues.map((i) => `${formatPath(i.path, prefix)}: ${i.message}`).join('; ');
}

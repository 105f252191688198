/**
 * Renders zod issues the way an operator reads them: `users[37].user_id:
 * Invalid UUID`. Field paths only, never input values (an input may be a key).
 */
import type { z } from 'zod';

export function formatPath(path: ReadonlyArray<PropertyKey>, prefix = ''): string {
  let out = prefix;
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out === '' ? '(root)' : out;
}

export function formatIssues(issues: ReadonlyArray<z.core.$ZodIssue>, prefix = ''): string {
  return issues.map((i) => `${formatPath(i.path, prefix)}: ${i.message}`).join('; ');
}

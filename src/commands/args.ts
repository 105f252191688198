/**
 * Command-line arguments: node's parseArgs for syntax, zod for meaning, so a
 * bad flag gets the same kind of message as a bad environment variable.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { z } from 'zod';

export class UsageError extends Error {
  override name = 'UsageError';
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Parses `argv` with `options`, then validates `{...values, positionals}`
 * with `schema`. Throws UsageError naming the flag and the problem.
 */
export function parseCommandArgs<S extends z.ZodType>(argv: readonly string[], options: Options, schema: S): z.output<S> {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const result = schema.safeParse({ ...parsed.values, positionals: parsed.positionals });
  if (!result.success) throw new UsageError(result.error.issues.map(describeIssue).join('; '));
  return result.data;
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const [head, index] = issue.path;
  const where = head === 'positionals' ? `argument ${Number(index ?? 0) + 1}` : `--${String(head ?? '?')}`;
  return `${where}: ${issue.message}`;
}

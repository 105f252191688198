/**
 * The building blocks of the configuration registry (config.ts): one zod
 * schema per kind of value (a URL, a key, a bounded count, days, a header
 * name, a flag, a cron expression, a host:port list), so each variable's
 * entry in the registry is one line.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { nodeCron } from './node-cron.js';

export const httpUrl = z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).transform((u) => u.replace(/\/+$/, ''));
// A key travels in an HTTP header: a line break (a pasted key, a file read with its newline) or
// a space would make every request fail as if the network were down, so it is a config error.
export const secret = z
  .string({ error: 'is required' })
  .min(1, 'is required')
  .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII with no spaces or line breaks (often a trailing newline)');
// A PEM file named by path (a CA or a certificate: not secret, so no _FILE convention of their own);
// read once at start-up, its problems named by the variable and the path, never the content.
export const pemFile = (holding: string) =>
  z.string().transform((path, ctx) => {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})` });
      return z.NEVER;
    }
    if (!text.includes(`-----BEGIN ${holding}-----`)) {
      ctx.addIssue({ code: 'custom', message: `${path}: is not a PEM file holding a ${holding}` });
      return z.NEVER;
    }
    return text;
  });
export const positiveInt = (def: number, max: number) => z.coerce.number().int().min(1).max(max).default(def);
export const nonNegativeInt = (def: number, max: number) => z.coerce.number().int().min(0).max(max).default(def);
// Days may be fractional (0.25 = 6 hours) down to one minute, so a short window needs no second unit.
export const days = (def: number, min: number, max: number) =>
  z.coerce
    .number()
    .refine((d) => d === 0 || d >= 1 / 1_440, 'must be 0 or at least one minute (0.0007 days)')
    .pipe(z.number().min(min).max(max))
    .default(def);
export const headerName = z
  .string()
  .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be an HTTP header name')
  .transform((h) => h.toLowerCase());
export const flag = z
  .enum(['0', '1', 'false', 'true', 'no', 'yes'], { error: 'must be 1, 0, true, false, yes or no' })
  .default('0')
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

export const cronExpression = z.string().refine((s) => nodeCron().validate(s), 'must be a valid cron expression');

export interface HostPort {
  host: string;
  port: number;
}

/** `host:port,host:port` (IPv6 in brackets) → list. */
export const hostPortList = z.string().transform((text, ctx) => {
  const out: HostPort[] = [];
  for (const item of text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')) {
    const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(item);
    const port = Number(m?.[2]);
    if (m === null || !(port >= 1 && port <= 65535)) {
      ctx.addIssue({ code: 'custom', message: `must be a comma-separated list of host:port (item ${out.length + 1} is not)` });
      return z.NEVER;
    }
    out.push({ host: (m[1] ?? '').replace(/^\[|\]$/g, ''), port });
  }
  if (out.length === 0) ctx.addIssue({ code: 'custom', message: 'must name at least one host:port' });
  return out;
});

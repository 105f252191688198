/**
 * A PostgreSQL sink's options, as its entry in the sinks file gives them,
 * validated at the edge, and the pg connection they make.
 *
 * The connection string carries the writer's password, so it is never in
 * the sinks file itself: `connection_file` names a file holding it (mode
 * 0600, read once at start), or `connection_credential` a systemd
 * credential (`$CREDENTIALS_DIRECTORY/<name>`). Errors name the option and
 * the file, never the string. TLS: `tls.ca_file` (verify the server),
 * `tls.cert_file` and `tls.key_file` (a client certificate); with `tls`
 * the server's certificate is always verified.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import { z } from 'zod';
import { FieldPolicySchema } from '../field-policy.js';

export const PostgresSinkSchema = z
  .strictObject({
    kind: z.literal('postgres'),
    name: z
      .string()
      .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'must be 1-64 of a-z, 0-9, _ and -')
      .optional(),
    connection_file: z.string().min(1).optional().describe('File holding the connection string (postgres://writer:…@host/db)'),
    connection_credential: z
      .string()
      .regex(/^[A-Za-z0-9_.-]+$/, 'must be a credential name')
      .optional(),
    schema: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case identifier of at most 63 characters')
      .default('user_mirror')
      .describe('PostgreSQL schema of this mirror: one per mirror'),
    tls: z
      .strictObject({
        ca_file: z.string().min(1).optional(),
        cert_file: z.string().min(1).optional(),
        key_file: z.string().min(1).optional(),
      })
      .refine((t) => (t.cert_file === undefined) === (t.key_file === undefined), 'cert_file and key_file go together')
      .optional(),
    batch_events: z.number().int().min(1).max(100_000).default(1_000).describe('Feed events applied per transaction'),
    field_policy: FieldPolicySchema.optional(),
  })
  .superRefine((o, ctx) => {
    if ((o.connection_file === undefined) === (o.connection_credential === undefined))
      ctx.addIssue({ code: 'custom', path: ['connection_file'], message: 'give exactly one of connection_file and connection_credential' });
  });
export type PostgresSinkOptions = z.output<typeof PostgresSinkSchema>;

/** The pg client configuration the options name; `readFile` reads the files (the connection string's, TLS's). */
export function connectionConfig(
  o: PostgresSinkOptions,
  env: NodeJS.ProcessEnv = process.env,
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): pg.ClientConfig {
  const read = (what: string, path: string): string => {
    try {
      return readFile(path);
    } catch (err) {
      throw new Error(`${what} ${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { cause: err });
    }
  };
  let source: { what: string; path: string };
  if (o.connection_file !== undefined) source = { what: 'connection_file', path: o.connection_file };
  else {
    const dir = env.CREDENTIALS_DIRECTORY;
    if (dir === undefined || dir === '')
      throw new Error('connection_credential: CREDENTIALS_DIRECTORY is not set (run under systemd with LoadCredential=)');
    source = { what: 'connection_credential', path: join(dir, o.connection_credential ?? '') };
  }
  const connectionString = read(source.what, source.path).trim();
  if (!/^postgres(ql)?:\/\//.test(connectionString))
    throw new Error(`${source.what} ${source.path}: must hold a postgres:// connection string (its text is not shown)`);
  const config: pg.ClientConfig = { connectionString, application_name: `user-mirror sink ${o.name ?? o.schema}` };
  if (o.tls !== undefined) {
    config.ssl = {
      rejectUnauthorized: true,
      ...(o.tls.ca_file === undefined ? {} : { ca: read('tls.ca_file', o.tls.ca_file) }),
      ...(o.tls.cert_file === undefined ? {} : { cert: read('tls.cert_file', o.tls.cert_file) }),
      ...(o.tls.key_file === undefined ? {} : { key: read('tls.key_file', o.tls.key_file) }),
    };
  }
  return config;
}

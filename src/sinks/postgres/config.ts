/**
 * A PostgreSQL sink's connection: the pg client configuration its entry in
 * SINKS_FILE makes (src/sinks/sinks-file.ts validates the entry and reads
 * the connection string and TLS files by reference), and where it goes as
 * status and the logs name it, without the password.
 *
 * With `tls` the server's certificate is always verified (`ca_file` to
 * verify it by, `cert_file` and `key_file` for a client certificate).
 */
import type pg from 'pg';
import type { PostgresSink } from '../sinks-file.js';

/** How long a connection attempt may take before the pass counts as failing (and retries with a backoff). */
const CONNECT_MS = 10_000;

export function connectionConfig(sink: Pick<PostgresSink, 'name' | 'connectionString' | 'tls'>): pg.ClientConfig {
  const config: pg.ClientConfig = {
    connectionString: sink.connectionString,
    application_name: `user-mirror sink ${sink.name}`,
    connectionTimeoutMillis: CONNECT_MS,
    // A dead peer is noticed by the kernel instead of a query waiting forever.
    keepAlive: true,
  };
  if (sink.tls !== undefined) {
    config.ssl = {
      rejectUnauthorized: true,
      ...(sink.tls.ca === undefined ? {} : { ca: sink.tls.ca }),
      ...(sink.tls.cert === undefined ? {} : { cert: sink.tls.cert }),
      ...(sink.tls.key === undefined ? {} : { key: sink.tls.key }),
    };
  }
  return config;
}

/** `postgres host:port/db schema s`: the destination as status and the logs name it (no user, no password). */
export function describePostgres(sink: Pick<PostgresSink, 'connectionString' | 'schema'>): string {
  let at = 'postgres';
  try {
    const u = new URL(sink.connectionString);
    const socket = u.searchParams.get('host');
    const host = u.hostname === '' ? (socket ?? 'localhost') : u.hostname;
    at = `postgres ${host}${u.port === '' ? '' : `:${u.port}`}${u.pathname === '' ? '' : u.pathname}`;
  } catch {
    // A string URL cannot read (pg's own forms): the schema still names it.
  }
  return `${at} schema ${sink.schema}`;
}

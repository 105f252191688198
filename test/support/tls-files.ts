/**
 * Certificates for TLS tests, made with `openssl` in a private directory:
 * a CA, a server certificate for a name that is not the address connected
 * to (the test sets `servername`), a client certificate, and a second CA
 * that signed none of them (the wrong CA). Keys are mode 0600.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TlsFiles {
  dir: string;
  /** The server certificate's only name. */
  serverName: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  wrongCa: string;
  remove(): void;
}

/** Why TLS files cannot be made here (no openssl), or undefined. */
export function opensslMissing(): string | undefined {
  return spawnSync('openssl', ['version']).status === 0 ? undefined : 'openssl is not on PATH';
}

export function makeTlsFiles(serverName = 'bus.internal'): TlsFiles {
  const dir = mkdtempSync(join(tmpdir(), 'user-mirror-tls-'));
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ca = (name: string) =>
    run(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.pem`,
    );
  const issue = (name: string, cn: string, ext: string[]) => {
    run('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, ...ext, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    run(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-copy_extensions',
      'copy',
      '-out',
      `${name}.pem`,
    );
  };
  ca('ca');
  ca('wrong-ca');
  issue('server', serverName, ['-addext', `subjectAltName=DNS:${serverName}`]);
  issue('client', 'user-mirror', []);
  for (const key of ['ca.key', 'wrong-ca.key', 'server.key', 'client.key']) chmodSync(join(dir, key), 0o600);
  const at = (f: string) => join(dir, f);
  return {
    dir,
    serverName,
    ca: at('ca.pem'),
    serverCert: at('server.pem'),
    serverKey: at('server.key'),
    clientCert: at('client.pem'),
    clientKey: at('client.key'),
    wrongCa: at('wrong-ca.pem'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

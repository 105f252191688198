/**
 * The replica's own TLS: its certificate and key come from files
 * (REPLICA_TLS_CERT_FILE, REPLICA_TLS_KEY_FILE), are checked as a pair at
 * start (a problem names the setting and the path, never the content), and
 * are read again when they change, so a renewal (certbot, cert-manager, a
 * cron'd `openssl`) is served to new connections with no restart.
 *
 * The files are looked at every TLS_POLL_MS (two stats: cheap, and unlike a
 * file watch it follows a symlink swapped to a new target, as certbot does).
 * A change to a pair that does not work (the key of another certificate, a
 * file cut short) is refused: the certificate served so far stays, and the
 * refusal is logged once per change with what is wrong (after a second look,
 * so a renewal caught between its two files is not called broken); the next
 * change is tried again. Connections already open keep the context they began with.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import type { Logger } from 'pino';

export interface ReplicaTlsFiles {
  certFile: string;
  keyFile: string;
}

/** A pair that works, and what a log or a metric says of it. */
export interface TlsPair {
  cert: Buffer;
  key: Buffer;
  /** The leaf certificate's serial number (hex) and end of validity. */
  serial: string;
  validTo: Date;
}

/** How often the files are looked at. */
const TLS_POLL_MS = 2_000;

class TlsFileProblem extends Error {}

function readPem(setting: string, path: string, holding: RegExp, what: string): Buffer {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (err) {
    throw new TlsFileProblem(`${setting}: ${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (!holding.test(bytes.toString('latin1'))) throw new TlsFileProblem(`${setting}: ${path}: is not a PEM file holding ${what}`);
  return bytes;
}

/**
 * Reads the pair and checks it is one: a certificate and the private key
 * that belongs to it. Throws an Error whose message names the setting.
 */
export function readTlsPair(files: ReplicaTlsFiles): TlsPair {
  const cert = readPem('REPLICA_TLS_CERT_FILE', files.certFile, /-----BEGIN CERTIFICATE-----/, 'a certificate');
  const key = readPem('REPLICA_TLS_KEY_FILE', files.keyFile, /-----BEGIN [A-Z ]*PRIVATE KEY-----/, 'a private key');
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    const mismatch = /KEY_VALUES_MISMATCH|key values mismatch/i.test(`${code} ${(err as Error).message}`);
    throw new TlsFileProblem(
      mismatch
        ? `REPLICA_TLS_KEY_FILE: ${files.keyFile}: is not the key of the certificate in REPLICA_TLS_CERT_FILE (${files.certFile})`
        : `REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE: ${files.certFile}, ${files.keyFile}: not a usable certificate and key (${code})`,
    );
  }
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch {
    throw new TlsFileProblem(`REPLICA_TLS_CERT_FILE: ${files.certFile}: its first certificate cannot be read`);
  }
  return { cert, key, serial: leaf.serialNumber, validTo: new Date(leaf.validTo) };
}

/** The problem with the pair, or undefined when it works (for the configuration's one report). */
export function tlsPairProblem(files: ReplicaTlsFiles): string | undefined {
  try {
    readTlsPair(files);
    return undefined;
  } catch (err) {
    if (err instanceof TlsFileProblem) return err.message;
    throw err;
  }
}

/** What tells a changed file: device, inode (a renamed-in file), size, modification and change times. */
function stampOf(files: ReplicaTlsFiles): string {
  return [files.certFile, files.keyFile]
    .map((path) => {
      try {
        const s = statSync(path);
        return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code ?? 'error';
      }
    })
    .join('|');
}

export interface TlsWatch {
  /** The pair served to new connections now. */
  current(): TlsPair;
  stop(): void;
}

/**
 * Starts serving `first` and looks at the files every `everyMs`: a changed
 * pair that works is handed to `apply` (the server's setSecureContext); one
 * that does not is logged and the served one kept.
 */
export function watchTlsFiles(
  files: ReplicaTlsFiles,
  first: TlsPair,
  apply: (pair: TlsPair) => void,
  log: Logger,
  everyMs: number = TLS_POLL_MS,
): TlsWatch {
  let served = first;
  let seen = stampOf(files);
  let suspect: string | undefined;
  const timer = setInterval(() => {
    const stamp = stampOf(files);
    if (stamp === seen) return;
    let pair: TlsPair;
    try {
      pair = readTlsPair(files);
    } catch (err) {
      // A renewal may be halfway (the certificate written, the key not yet): refused only when a second look finds the same files.
      if (stamp !== suspect) {
        suspect = stamp;
        return;
      }
      seen = stamp;
      log.error(
        {
          event: 'replica.tls_renewal_refused',
          problem: (err as Error).message,
          servedSerial: served.serial,
          servedValidTo: served.validTo,
        },
        `replica TLS files changed but cannot be used, still serving certificate ${served.serial} (valid to ${served.validTo.toISOString()}): ${(err as Error).message}`,
      );
      return;
    }
    seen = stamp;
    if (pair.serial === served.serial && pair.cert.equals(served.cert) && pair.key.equals(served.key)) return;
    apply(pair);
    log.info(
      { event: 'replica.tls_renewed', serial: pair.serial, validTo: pair.validTo, previousSerial: served.serial },
      `replica TLS certificate ${pair.serial} (valid to ${pair.validTo.toISOString()}) served to new connections`,
    );
    served = pair;
  }, everyMs);
  timer.unref();
  return {
    current: () => served,
    stop: () => clearInterval(timer),
  };
}

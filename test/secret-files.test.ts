/**
 * Secrets from files: `<NAME>_FILE` and systemd credentials
 * ($CREDENTIALS_DIRECTORY/<NAME>), read by readConfig like the variable
 * itself. Real files in a temporary folder; a file's content never appears
 * in a problem or a warning.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readConfig } from '../src/runtime/config.js';
import { problemsOf } from './support/config-problems.js';
import { FILE_SECRETS } from '../src/runtime/secret-files.js';
import { readQueueSettings } from '../jobs/redis-connection.js';
import { REDIS_URL_CASES, REDIS_URL_PASSWORD } from './support/redis-url-cases.js';

const dir = mkdtempSync(join(tmpdir(), 'user-mirror-secrets-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const KEY = 'sk_file_0123456789abcdef';

function file(name: string, text: string, mode = 0o600): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
}

describe('a secret from a file', () => {
  it('reads <NAME>_FILE, dropping the one trailing newline an editor adds', () => {
    const warnings: string[] = [];
    const config = readConfig(['SERVICE_API_KEY'], { SERVICE_API_KEY_FILE: file('key', `${KEY}\n`) }, (w) => warnings.push(w));
    expect(config.SERVICE_API_KEY).toBe(KEY);
    expect(warnings).toEqual([]);
  });

  it('reads a systemd credential named after the variable', () => {
    const credentials = join(dir, 'credentials');
    mkdirSync(credentials, { mode: 0o700 });
    writeFileSync(join(credentials, 'MANAGEMENT_KEY'), 'mg_cred_0123456789', { mode: 0o400 });
    expect(readConfig(['MANAGEMENT_KEY'], { CREDENTIALS_DIRECTORY: credentials }).MANAGEMENT_KEY).toBe('mg_cred_0123456789');
    // A credential for another variable does not count as this one's.
    expect(problemsOf(() => readConfig(['SERVICE_API_KEY'], { CREDENTIALS_DIRECTORY: credentials }))).toEqual([
      'SERVICE_API_KEY: is required',
    ]);
  });

  it('refuses a variable given twice, naming both sources', () => {
    const path = file('twice', KEY);
    expect(problemsOf(() => readConfig(['SERVICE_API_KEY'], { SERVICE_API_KEY: KEY, SERVICE_API_KEY_FILE: path }))).toEqual([
      `SERVICE_API_KEY: set more than once (SERVICE_API_KEY, SERVICE_API_KEY_FILE=${path}); keep one`,
    ]);
  });

  it('names the file and the problem, never its content: unreadable, empty, or a bad value', () => {
    const missing = join(dir, 'nope');
    const empty = file('empty', '\n');
    const spaced = file('spaced', 'sk_with a space\n');
    const problems = problemsOf(() =>
      readConfig(['SERVICE_API_KEY', 'MANAGEMENT_KEY', 'REPLICA_API_KEY'], {
        SERVICE_API_KEY_FILE: missing,
        MANAGEMENT_KEY_FILE: empty,
        REPLICA_API_KEY_FILE: spaced,
      }),
    );
    expect(problems).toEqual([
      `SERVICE_API_KEY_FILE=${missing}: cannot be read (ENOENT)`,
      `MANAGEMENT_KEY_FILE=${empty}: is empty`,
      `REPLICA_API_KEY (from REPLICA_API_KEY_FILE=${spaced}): must be printable ASCII with no spaces or line breaks (often a trailing newline)`,
    ]);
    expect(problems.join('\n')).not.toContain('sk_with');
  });

  it('warns, by path and mode only, about a file every account can read', () => {
    const path = file('open', KEY, 0o644);
    const warnings: string[] = [];
    expect(
      readConfig(['WEBHOOK_SECRET'], { WEBHOOK_SECRET_FILE: file('wh', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n', 0o604) }, (w) =>
        warnings.push(w),
      ).WEBHOOK_SECRET,
    ).toBe('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    readConfig(['SERVICE_API_KEY'], { SERVICE_API_KEY_FILE: path }, (w) => warnings.push(w));
    expect(warnings).toEqual([
      `WEBHOOK_SECRET_FILE=${join(dir, 'wh')}: readable by every account on this host (mode 0604); chmod 600 it`,
      `SERVICE_API_KEY_FILE=${path}: readable by every account on this host (mode 0644); chmod 600 it`,
    ]);
    expect(warnings.join('\n')).not.toContain(KEY);
  });

  it('covers every secret the issue names, and a REDIS_URL that carries a password', () => {
    expect([...FILE_SECRETS].sort()).toEqual(
      [
        'MANAGEMENT_KEY',
        'REDIS_PASSWORD',
        'REDIS_SENTINEL_PASSWORD',
        'REDIS_TLS_KEY',
        'REDIS_URL',
        'REPLICA_API_KEY',
        'SERVICE_API_KEY',
        'WEBHOOK_SECRET',
      ].sort(),
    );
    expect(readConfig(['REDIS_URL'], { REDIS_URL_FILE: file('redis', 'redis://:pw@127.0.0.1:6390/0\n') }).REDIS_URL).toBe(
      'redis://:pw@127.0.0.1:6390/0',
    );
  });

  it('refuses a REDIS_URL with a password anywhere (user info or query, any case) given by value, naming REDIS_URL_FILE', () => {
    for (const { url, password } of REDIS_URL_CASES) {
      if (!password) {
        expect(readConfig(['REDIS_URL'], { REDIS_URL: url }).REDIS_URL, url).toBe(url);
        continue;
      }
      const problems = problemsOf(() => readConfig(['REDIS_URL'], { REDIS_URL: url }));
      expect(problems, url).toEqual([expect.stringMatching(/^REDIS_URL: carries a password \(in its (user info|query)\), given by value/)]);
      expect(problems[0], url).toContain('set REDIS_URL_FILE instead');
      expect(problems.join('\n'), url).not.toContain(REDIS_URL_PASSWORD);
      // From a file it is what the rule asks for.
      expect(readConfig(['REDIS_URL'], { REDIS_URL_FILE: file('redis-url', url) }).REDIS_URL, url).toBe(url);
      // The producer library reads its host's environment, where the host decides.
      expect(readQueueSettings({ REDIS_URL: url }).endpoint, url).toEqual({ mode: 'single', url });
    }
  });

  it('cluster and sentinel lists take host:port only, so they cannot carry a password', () => {
    for (const name of ['REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const) {
      const problems = problemsOf(() => readConfig([name], { [name]: `app:${REDIS_URL_PASSWORD}@10.0.0.5:26379` }));
      expect(problems, name).toEqual([`${name}: must be a comma-separated list of host:port (item 1 is not)`]);
    }
  });
});

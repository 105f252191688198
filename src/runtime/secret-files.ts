/**
 * Where a secret comes from: its variable (`SERVICE_API_KEY`), a file named
 * by `<NAME>_FILE` (the convention of container and Compose estates), or a
 * systemd credential (`LoadCredential=<NAME>:/path`, read from
 * `$CREDENTIALS_DIRECTORY/<NAME>`). A file keeps the key out of the
 * environment, and so out of pm2's dump (`pm2 save`) and of `ps e`.
 *
 * One source only: two are a configuration error, since which one wins would
 * be a guess. A file's content is never quoted in an error or a warning, only
 * its path; one trailing newline is dropped (editors add one).
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The variables that may come from a file. */
export const FILE_SECRETS = [
  'SERVICE_API_KEY',
  'MANAGEMENT_KEY',
  'WEBHOOK_SECRET',
  'REPLICA_API_KEY',
  'REDIS_URL',
  'REDIS_PASSWORD',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_TLS_KEY',
] as const;

export type FileSecret = (typeof FILE_SECRETS)[number];

export function isFileSecret(name: string): name is FileSecret {
  return (FILE_SECRETS as readonly string[]).includes(name);
}

/** What a secret's sources gave: its raw value (undefined when unset), or the problem, named. */
export type SecretSource = { ok: true; value: string | undefined; from: string } | { ok: false; problem: string };

/**
 * The raw value of `name` from its one source. `warn` hears of a file other
 * accounts can read (it works, but should not be so).
 */
export function readSecretSource(name: FileSecret, env: NodeJS.ProcessEnv, warn: (line: string) => void): SecretSource {
  const sources: Array<{ label: string; file?: string; value?: string }> = [];
  const direct = env[name];
  if (direct !== undefined && direct !== '') sources.push({ label: name, value: direct });
  const file = env[`${name}_FILE`];
  if (file !== undefined && file !== '') sources.push({ label: `${name}_FILE=${file}`, file });
  const credentials = env.CREDENTIALS_DIRECTORY;
  if (credentials !== undefined && credentials !== '') {
    const path = join(credentials, name);
    if (exists(path)) sources.push({ label: `the systemd credential ${name} (${path})`, file: path });
  }
  if (sources.length > 1)
    return { ok: false, problem: `${name}: set more than once (${sources.map((s) => s.label).join(', ')}); keep one` };
  const [source] = sources;
  if (source === undefined) return { ok: true, value: undefined, from: name };
  if (source.file === undefined) return { ok: true, value: source.value, from: name };
  let text: string;
  try {
    const mode = statSync(source.file).mode;
    text = readFileSync(source.file, 'utf8');
    if ((mode & 0o007) !== 0) {
      warn(`${source.label}: readable by every account on this host (mode 0${(mode & 0o777).toString(8)}); chmod 600 it`);
    }
  } catch (err) {
    return { ok: false, problem: `${source.label}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
  const value = text.replace(/\r?\n$/, '');
  if (value === '') return { ok: false, problem: `${source.label}: is empty` };
  return { ok: true, value, from: source.label };
}

/** Whether any source of `name` is given (its variable, its _FILE, a credential), without reading it. */
export function secretGiven(name: FileSecret, env: NodeJS.ProcessEnv): boolean {
  const credentials = env.CREDENTIALS_DIRECTORY;
  return (
    (env[name] ?? '') !== '' ||
    (env[`${name}_FILE`] ?? '') !== '' ||
    (credentials !== undefined && credentials !== '' && exists(join(credentials, name)))
  );
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

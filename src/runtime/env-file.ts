/**
 * `.env`, read by the CLI itself (and by ecosystem.config.cjs), so that no
 * shell ever parses it: sourced with `set -a && . ./.env`, the `*` fields of
 * a SYNC_CRON value were expanded by the shell into file names. Node's own
 * parser (`process.loadEnvFile`) takes `NAME=value` lines, quotes included,
 * and never overrides a variable already in the environment: the
 * environment wins over the file.
 *
 * Which file: `ENV_FILE` when set (relative to the working directory; it must
 * exist; `/dev/null` reads none), else `./.env` when there is one.
 */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError } from './config.js';
import { errorMessage } from './line-text.js';

/** Loads the file into process.env; returns its path, or undefined when there is none to load. */
export function loadEnvFile(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): string | undefined {
  const given = env.ENV_FILE !== undefined && env.ENV_FILE !== '' ? env.ENV_FILE : undefined;
  const path = resolve(cwd, given ?? '.env');
  let isFile: boolean;
  try {
    const st = statSync(path);
    // ENV_FILE=/dev/null: no file, whatever ./.env holds (the tests run so).
    if (st.isCharacterDevice()) return undefined;
    isFile = st.isFile();
  } catch (err) {
    if ((err as { code?: string }).code !== 'ENOENT') throw new ConfigError([`ENV_FILE: cannot read ${path}: ${String(err)}`]);
    if (given === undefined) return undefined;
    throw new ConfigError([`ENV_FILE: ${path} does not exist`]);
  }
  if (!isFile) throw new ConfigError([`ENV_FILE: ${path} is not a file`]);
  try {
    process.loadEnvFile(path);
  } catch (err) {
    throw new ConfigError([`ENV_FILE: cannot read ${path}: ${errorMessage(err)}`]);
  }
  return path;
}

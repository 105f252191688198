/**
 * `.env.example`, rendered from the configuration registry (config.ts): one
 * line per variable with its default, what it is for, and whether it is a
 * secret. `npm run env-example` writes the file; test/release.test.ts fails
 * when the committed file and the registry drift apart.
 *
 * Each line's text and group come from the variable's entry in the registry,
 * so a variable cannot be added without them.
 */
import { ENV, SECRET_ENV, SETTING_GROUPS, SETTINGS, type EnvName } from './config.js';
import { isFileSecret } from './secret-files.js';

/** The default as the registry applies it, or undefined (required, or derived at run time). */
function defaultOf(name: EnvName): string | undefined {
  const parsed = ENV[name].safeParse(undefined);
  if (!parsed.success || parsed.data === undefined) return undefined;
  // MIRROR_ID's default is this host's name: not something to write into a shared file.
  if (name === 'MIRROR_ID') return undefined;
  const value: unknown = parsed.data;
  if (typeof value === 'boolean') return value ? '1' : '0';
  return String(value);
}

export function renderEnvExample(): string {
  const lines = [
    '# user-mirror configuration: every variable it reads, rendered from src/runtime/config.ts (npm run env-example).',
    '# Copy to .env and fill in; commented lines show defaults. Lines marked "secret" never go into git or a log.',
    '# The CLI and ecosystem.config.cjs read .env themselves (ENV_FILE names another file); the environment wins over it.',
    '# Give secrets as files (NAME_FILE, or systemd credentials in $CREDENTIALS_DIRECTORY): pm2 save stores the environment in clear.',
  ];
  const names = Object.keys(SETTINGS) as EnvName[];
  for (const [group, title] of SETTING_GROUPS) {
    lines.push('', `# --- ${title}`);
    for (const name of names.filter((n) => SETTINGS[n].group === group)) {
      const def = defaultOf(name);
      const fromFile = isFileSecret(name);
      lines.push(
        `# ${SETTINGS[name].about}${fromFile ? ` (secret; or ${name}_FILE, a file holding it, mode 0600)` : SECRET_ENV.has(name) ? ' (secret)' : ''}`,
      );
      lines.push(def === undefined ? `# ${name}=` : `# ${name}=${quoted(def)}`);
      if (fromFile) lines.push(`# ${name}_FILE=`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/**
 * A value with anything a shell or the .env parser would take apart (a cron
 * expression's spaces and `*`), in single quotes: the file is read by Node's
 * parser (src/runtime/env-file.ts), which drops them, and stays safe to source.
 */
function quoted(value: string): string {
  return /^[A-Za-z0-9_./:@,+-]*$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}

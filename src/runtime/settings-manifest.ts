/**
 * `dist/settings.json`, which the build writes and ecosystem.config.cjs reads:
 * the registry's names as pm2 needs them. pm2 loads that plain CommonJS file
 * itself and cannot import the registry (ESM, TypeScript), so the build
 * renders the lists it passes through: every variable (a secret also as its
 * `_FILE`), the secrets it must refuse by value, and what the replica's app reads.
 *
 * package.json's build writes it.
 */
import { SERVE_ENV, SETTINGS, type EnvName } from './config.js';
import { FILE_SECRETS, isFileSecret } from './secret-files.js';

/** What ecosystem.config.cjs reads. */
export interface SettingsManifest {
  /** Every registry variable, each file secret followed by its `_FILE` form. */
  variables: string[];
  /** The secrets pm2 must never hold by value (`pm2 save` writes its environment in clear). */
  secrets: string[];
  /**
   * What `serve` reads, for pm2's replica app: its variables, the service key it refuses to
   * take as its own, and MIRROR_GROUP, which every command reads first.
   */
  replica: string[];
}

export function settingsManifest(): SettingsManifest {
  const withFile = (name: EnvName): string[] => (isFileSecret(name) ? [name, `${name}_FILE`] : [name]);
  return {
    variables: (Object.keys(SETTINGS) as EnvName[]).flatMap(withFile),
    secrets: [...FILE_SECRETS],
    replica: ([...SERVE_ENV, 'SERVICE_API_KEY', 'MIRROR_GROUP'] as const).flatMap(withFile),
  };
}

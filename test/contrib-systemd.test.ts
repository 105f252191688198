/**
 * contrib/systemd/user-mirror.service, the hardened unit that ships: scored
 * by the machine's own `systemd-analyze security --offline=true` (no systemd
 * needs to run), and read for what docs/security.md promises of it: keys
 * as credentials the daemon reads through its *_FILE variables, the mirror,
 * logs and backups its only writable paths, UMask=0077, and
 * MemoryDenyWriteExecute off (V8 needs W+X memory).
 *
 * Where systemd-analyze is absent, the scoring test says NOT RUN in its name.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FILE_SECRETS } from '../src/runtime/secret-files.js';
import { ROOT } from './support/daemon-process.js';

const UNIT = join(ROOT, 'contrib', 'systemd', 'user-mirror.service');
/** The most exposure the unit may have (systemd-analyze's 0-10 scale; 10 is "UNSAFE" and what a bare unit gets). */
const MAX_EXPOSURE = 2.5;

const analyze = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
const notRun = analyze.status === 0 ? '' : `NOT RUN (systemd-analyze not found: ${analyze.error?.message ?? analyze.stderr}): `;

/** The unit's directives as [key, value] pairs, in order (comments and section lines left out). */
function directives(): Array<[string, string]> {
  return readFileSync(UNIT, 'utf8')
    .split('\n')
    .filter((l) => /^[A-Za-z]+=/.test(l))
    .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
}
const values = (key: string) => directives().flatMap(([k, v]) => (k === key ? [v] : []));

describe('contrib/systemd/user-mirror.service', () => {
  it(`${notRun}systemd-analyze security --offline=true scores it ${MAX_EXPOSURE} or below`, () => {
    if (notRun !== '') return;
    const r = spawnSync('systemd-analyze', ['security', '--offline=true', '--no-pager', UNIT], { encoding: 'utf8' });
    const out = `${r.stdout}${r.stderr}`;
    const score = /Overall exposure level for user-mirror\.service: (\d+(?:\.\d+)?) (\S+)/.exec(out);
    expect(score, out).not.toBeNull();
    expect(Number(score?.[1]), out).toBeLessThanOrEqual(MAX_EXPOSURE);
    // Nothing in it that systemd does not know (a typo is silently ignored by the loader, so caught here).
    expect(out).not.toMatch(/Unknown key|Unknown section|Failed to parse|Invalid/i);
  });

  it('gives every key as a credential, read through the *_FILE variable the daemon knows (docs/configuration.md)', () => {
    const loaded = values('LoadCredential').map((v) => v.split(':')[0] ?? '');
    expect(loaded).toEqual(expect.arrayContaining(['service-api-key', 'management-key']));
    const env = values('Environment').flatMap((v) => v.split(/\s+/));
    for (const name of loaded) {
      const variable = env.find((e) => e.endsWith(`=%d/${name}`))?.split('=')[0];
      expect(variable, `a *_FILE=%d/${name} for the credential ${name}`).toBeDefined();
      expect(FILE_SECRETS.map((s) => `${s}_FILE`)).toContain(variable);
    }
    // No key given by value: SERVICE_API_KEY=… in the unit would show in `systemctl show`.
    expect(env.filter((e) => (FILE_SECRETS as readonly string[]).includes(e.split('=')[0] ?? ''))).toEqual([
      'REDIS_URL=redis://127.0.0.1:6379',
    ]);
  });

  it('writes only the mirror, logs and backups, with a private umask, and keeps W+X memory allowed for V8', () => {
    expect(values('ProtectSystem')).toEqual(['strict']);
    expect(values('ReadWritePaths').join(' ').split(/\s+/)).toEqual([
      '/var/lib/user-mirror',
      '/var/log/user-mirror',
      '-/var/backups/user-mirror',
    ]);
    expect(values('Environment').join(' ')).toContain('MIRROR_DB=/var/lib/user-mirror/mirror.db');
    expect(values('UMask')).toEqual(['0077']);
    expect(values('MemoryDenyWriteExecute')).toEqual(['no']);
    expect(readFileSync(UNIT, 'utf8')).toMatch(/# Off on purpose: V8 .*W\+X/);
  });

  it('says why each directive it leaves out is left out', () => {
    const text = readFileSync(UNIT, 'utf8');
    const why = text.slice(text.indexOf('# Left out, and why:'));
    for (const left of ['ProcSubset=', 'PrivateNetwork=', 'IPAddressDeny=', 'DynamicUser=', 'RootDirectory=', 'RestrictFileSystems=']) {
      expect(why, left).toContain(left);
      expect(values(left.slice(0, -1)), left).toEqual([]);
    }
  });
});

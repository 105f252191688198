/**
 * A folder made for private files (db/file-modes.ts `createPrivateFolder`:
 * BACKUP_DIR, an export's folder, a database's folder): made with the file
 * policy's mode whatever the umask, the folders up to it too, checked by
 * stat; a folder that exists is the operator's and is left as it is. No
 * probe file is created and deleted on the way.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrivateFolder, groupPolicy, PRIVATE_POLICY } from '../db/file-modes.js';

let dir: string;
let umask: number;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'private-folder-'));
  // The loosest common umask: what the folder gets must come from the policy, not from here.
  umask = process.umask(0o022);
});

afterAll(() => {
  process.umask(umask);
  rmSync(dir, { recursive: true, force: true });
});

const modeOf = (path: string): number => statSync(path).mode & 0o7777;

describe('createPrivateFolder', () => {
  it('makes the folder and the ones up to it 0700, this account own, and nothing inside', () => {
    const parent = join(dir, 'backups');
    const target = join(parent, 'nightly');
    expect(createPrivateFolder(target, PRIVATE_POLICY)).toBe(parent);
    for (const path of [parent, target]) {
      expect(modeOf(path), path).toBe(0o700);
      expect(statSync(path).uid, path).toBe(process.getuid?.());
    }
    expect(readdirSync(target)).toEqual([]);
  });

  it('leaves a folder that exists as it is', () => {
    const existing = join(dir, 'operators');
    mkdirSync(existing, { mode: 0o755 });
    expect(modeOf(existing)).toBe(0o755);
    expect(createPrivateFolder(existing, PRIVATE_POLICY)).toBeUndefined();
    expect(modeOf(existing)).toBe(0o755);
  });

  it("with a reader group: setgid 02750 of that group, so SQLite's later files are the group's too", () => {
    const gid = process.getgid?.() ?? 0;
    const target = join(dir, 'shared');
    expect(createPrivateFolder(target, groupPolicy(gid))).toBe(target);
    expect(modeOf(target)).toBe(0o2750);
    expect(statSync(target).gid).toBe(gid);
  });
});

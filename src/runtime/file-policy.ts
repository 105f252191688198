/**
 * The process's file policy, set once at start by the CLI (and the sync
 * child): everything this process creates is its account's own. The umask
 * (077, or 027 with MIRROR_GROUP) covers every file and folder it makes, the
 * ones SQLite makes later included; db/file-modes.ts sets the databases'
 * modes exactly, whatever the umask, and narrows ones found wider.
 *
 * MIRROR_GROUP names a group whose members may read the mirror (analytics
 * under another account): files 0640, folders 02750, never world access.
 */
import { readFileSync } from 'node:fs';
import { groupPolicy, PRIVATE_POLICY, setFilePolicy, type FilePolicy } from '../../db/file-modes.js';
import { carryIntoNextPass, ConfigError, readConfig } from './config.js';

/** The group's id: a number as is, a name looked up in /etc/group. Undefined when no such group. */
function groupId(name: string, groupFile = '/etc/group'): number | undefined {
  if (/^\d+$/.test(name)) return Number(name);
  let text: string;
  try {
    text = readFileSync(groupFile, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const [group, , gid] = line.split(':');
    if (group === name && gid !== undefined && /^\d+$/.test(gid)) return Number(gid);
  }
  return undefined;
}

/** The policy MIRROR_GROUP asks for, checked: the group exists and this account may give files to it. */
function filePolicyFor(group: string | undefined): FilePolicy {
  if (group === undefined) return PRIVATE_POLICY;
  const gid = groupId(group);
  if (gid === undefined) throw new ConfigError([`MIRROR_GROUP: no group '${group}' on this host`]);
  const member = process.getuid?.() === 0 || process.getgid?.() === gid || (process.getgroups?.() ?? []).includes(gid);
  if (!member)
    throw new ConfigError([`MIRROR_GROUP: this account is not a member of '${group}' (gid ${gid}), so it cannot give files to it`]);
  return groupPolicy(gid);
}

/**
 * Sets the umask and the databases' modes from MIRROR_GROUP, before the
 * process reads the rest of its configuration or creates any file. A bad
 * MIRROR_GROUP (no such group, not a member, not a name) does not end the
 * process here: the private policy (0600, 0700) is set instead, never wider
 * than asked, and the problem is carried into the command's own
 * configuration pass, which names it with every other one (one round of
 * problems, not two). That pass comes before any file is created.
 */
export function applyFilePolicy(env: NodeJS.ProcessEnv = process.env): FilePolicy {
  let policy = PRIVATE_POLICY;
  try {
    policy = filePolicyFor(readConfig(['MIRROR_GROUP'], env).MIRROR_GROUP);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    carryIntoNextPass(err.problems);
  }
  process.umask(policy.gid === undefined ? 0o077 : 0o027);
  setFilePolicy(policy);
  return policy;
}

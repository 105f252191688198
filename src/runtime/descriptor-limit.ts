/**
 * This process's limit on open file descriptors (the soft `ulimit -n`,
 * systemd's LimitNOFILE=): every connection, file and socket holds one.
 * Read from /proc/self/limits; undefined where there is none (not Linux).
 */
import { readFileSync } from 'node:fs';

export function openFileLimit(): number | undefined {
  let text: string;
  try {
    text = readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return undefined;
  }
  const soft = /^Max open files\s+(\d+|unlimited)/m.exec(text)?.[1];
  return soft === undefined || soft === 'unlimited' ? undefined : Number(soft);
}

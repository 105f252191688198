/**
 * `--users-file`: records a test wants served verbatim, including malformed
 * ones (that is often the point), so only the outer shape is checked.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { JsonRecord } from './user-revision.js';

const RecordList = z.array(z.record(z.string(), z.unknown()));
const UsersFileSchema = z.union([RecordList, z.object({ users: RecordList })]);

export class UsersFileError extends Error {
  override name = 'UsersFileError';
}

export async function loadUsersFile(path: string): Promise<JsonRecord[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsersFileError(`cannot read users file ${path}: ${(err as Error).message}`);
  }
  return parseUsersFile(text, path);
}

export function parseUsersFile(text: string, name = 'users file'): JsonRecord[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new UsersFileError(`${name} is not JSON: ${(err as Error).message}`);
  }
  const parsed = UsersFileSchema.safeParse(json);
  if (!parsed.success) throw new UsersFileError(`${name} must hold an array of user objects or {"users": [...]}`);
  return Array.isArray(parsed.data) ? parsed.data : parsed.data.users;
}

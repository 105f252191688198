/**
 * One file a migration (db/migrations/NNN-name.ts), all of them in the list:
 * a file left out of MIGRATIONS would never be applied, and a file whose
 * number or name is not its migration's would mislead whoever reads the folder.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../db/migrations.js';
import { ROOT } from './support/mirror-fixtures.js';

describe('the migration files', () => {
  it('are all listed, in order, each numbered and named for its migration', () => {
    const files = readdirSync(join(ROOT, 'db/migrations'))
      .filter((f) => f.endsWith('.ts'))
      .sort();
    expect(MIGRATIONS.map((m) => `${String(m.version).padStart(3, '0')}-${m.name}.ts`)).toEqual(files);
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
  });
});

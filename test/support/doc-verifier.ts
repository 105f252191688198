/**
 * The receiver's side of webhook signatures is the check docs/changes.md
 * gives receivers to copy: the tests run that one, taken from the page as
 * written, so the project keeps one verifier and it is the one it ships.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** docs/changes.md's `verifyWebhook(secret, headers, rawBody, toleranceSeconds = 300)`: true when it accepts. */
export type DocVerifier = (
  secret: string,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  rawBody: Buffer,
  toleranceSeconds?: number,
) => boolean;

/** The page's fenced block in `lang` (the first one). */
export function docBlock(lang: string): string {
  const doc = readFileSync(new URL('../../docs/changes.md', import.meta.url), 'utf8');
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(doc);
  if (m?.[1] === undefined) throw new Error(`docs/changes.md has no ${lang} block`);
  return m[1];
}

async function load(): Promise<DocVerifier> {
  const dir = mkdtempSync(join(tmpdir(), 'doc-verifier-'));
  try {
    const file = join(dir, 'verify.mjs');
    writeFileSync(file, docBlock('js'), { mode: 0o600 });
    const mod = (await import(pathToFileURL(file).href)) as { verifyWebhook: DocVerifier };
    return mod.verifyWebhook;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export const verifyWebhook: DocVerifier = await load();

/**
 * The Python producer in docs/removals.md, taken from the page as written:
 * it compiles with the machine's python3, and its `removal_target` names the
 * same queue as `user-mirror removals target` for every shape of
 * MANAGEMENT_URL. What is not run here: `main`, which needs BullMQ for Python
 * (`pip install bullmq`), a package this machine cannot install (its
 * registries are npm and Debian's); the payload and options it sends are the
 * ones jobs/REMOVAL-QUEUE.md specifies, which test/removal-*.test.ts enqueue
 * as raw jobs.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from './support/daemon-process.js';
import { ROOT, tempDir } from './support/mirror-fixtures.js';

const dir = tempDir('user-mirror-python-');
afterAll(() => dir.remove());

const blocks = [...readFileSync(join(ROOT, 'docs/removals.md'), 'utf8').matchAll(/```python\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
const program = dir.file('enqueue_removal.py');
writeFileSync(program, blocks[0] ?? '');

describe('the Python producer in docs/removals.md', () => {
  it('is one complete program that compiles', () => {
    expect(blocks).toHaveLength(1);
    expect(blocks[0]).toMatch(/^import asyncio$/m);
    expect(blocks[0]).toMatch(/^if __name__ == "__main__":$/m);
    execFileSync('python3', ['-m', 'py_compile', program], { stdio: 'pipe' });
  });

  it.each([
    'https://api.example.com',
    'https://Api.Example.com:443/mgmt/',
    'http://127.0.0.1:8787',
    'https://user:pw@management.example.com/v1/',
    'http://host.example:8080/base/path',
  ])('names the queue the CLI names for %s', async (url) => {
    const python = execFileSync(
      'python3',
      ['-c', 'import runpy, sys; print(runpy.run_path(sys.argv[1])["removal_target"](sys.argv[2]))', program, url],
      { encoding: 'utf8' },
    ).trim();
    const cli = await runCli(['removals', 'target', '--json'], { MANAGEMENT_URL: url });
    expect(cli.code, cli.stderr).toBe(0);
    expect(python).toBe((JSON.parse(cli.stdout) as { target: string }).target);
  });
});

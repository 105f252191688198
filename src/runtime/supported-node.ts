/**
 * The Node.js releases user-mirror runs on, checked before anything else
 * loads: better-sqlite3 13 segfaults on `require` under Node 20 and undici 8
 * throws there, so an unsupported Node must be refused with one line, not a
 * crash trace. This module imports nothing, so the check runs on any Node.
 *
 * The table is the one source: package.json's `engines.node` is its
 * rendering (test/supported-node.test.ts keeps the two in step).
 */

/** One supported release line: its lowest usable release, and whether later majors are accepted too. */
interface SupportedLine {
  major: number;
  minimum: readonly [number, number, number];
  /** The newest line also accepts later majors: better-sqlite3 13 is Node-API, so a new major needs no rebuild. */
  andLater: boolean;
}

/**
 * 22 from 22.19.0 (undici 8's minimum), 24, and 26 or later. Odd lines (23,
 * 25) are short-lived and at end of life; Node 20 reached end of life on
 * 2026-04-30.
 */
const SUPPORTED_NODE: readonly SupportedLine[] = [
  { major: 22, minimum: [22, 19, 0], andLater: false },
  { major: 24, minimum: [24, 0, 0], andLater: false },
  { major: 26, minimum: [26, 0, 0], andLater: true },
];

/** package.json's `engines.node`, rendered from {@link SUPPORTED_NODE}. */
export function enginesRange(lines: readonly SupportedLine[] = SUPPORTED_NODE): string {
  return lines.map((l) => `${l.andLater ? '>=' : '^'}${l.minimum.join('.')}`).join(' || ');
}

/** Whether `version` (`v24.21.0` or `24.21.0`) is a supported Node. */
export function isSupportedNode(version: string, lines: readonly SupportedLine[] = SUPPORTED_NODE): boolean {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (m === null) return false;
  const v = [Number(m[1]), Number(m[2]), Number(m[3])] as const;
  return lines.some(
    (l) => (v[0] === l.major || (l.andLater && v[0] > l.major)) && compare(v, v[0] === l.major ? l.minimum : [v[0], 0, 0]) >= 0,
  );
}

function compare(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** The one line an operator sees on an unsupported Node. */
export function unsupportedNodeMessage(version: string): string {
  const wanted = SUPPORTED_NODE.map((l) =>
    l.andLater
      ? `${l.major} or later`
      : l.minimum[1] === 0 && l.minimum[2] === 0
        ? `${l.major}`
        : `${l.major} (${l.minimum.join('.')} or later)`,
  ).join(', ');
  return `user-mirror: Node.js ${version} is not supported; it needs Node.js ${wanted} (set the PATH to such a node, or run it through npm scripts/npx in a checkout, which carry one)\n`;
}

/** Exits with code 2 and one line on stderr unless this process runs on a supported Node. */
export function refuseUnsupportedNode(): void {
  if (isSupportedNode(process.version)) return;
  process.stderr.write(unsupportedNodeMessage(process.version));
  process.exit(2);
}

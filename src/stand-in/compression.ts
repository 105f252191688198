/**
 * The stand-in compresses its answers when the client asks, as the live
 * service's front door does: `gzip` if accepted, else `br`, else `zstd`
 * (where this Node has it); never below COMPRESS_MIN_BYTES, where it saves
 * nothing. `--no-compress` turns it off (a loopback bench may want the
 * bytes plain).
 */
import * as zlib from 'node:zlib';

/** Bodies smaller than this go plain, as front doors do (a header and a detail line gain nothing). */
export const COMPRESS_MIN_BYTES = 1024;

type Coder = (body: Buffer) => Buffer;

const zstdCompress = (zlib as { zstdCompressSync?: (b: Buffer) => Buffer }).zstdCompressSync;

/** By preference. Level 6 / quality 5: a front door's usual trade of CPU for bytes. */
const CODERS: ReadonlyArray<[string, Coder]> = [
  ['gzip', (b) => zlib.gzipSync(b, { level: 6 })],
  ['br', (b) => zlib.brotliCompressSync(b, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 5 } })],
  ...(zstdCompress === undefined ? [] : [['zstd', (b: Buffer) => zstdCompress(b)] as [string, Coder]]),
];

/** The coding to answer with for an `accept-encoding` header, or undefined (plain). `q=0` refuses one. */
export function chooseEncoding(accept: string | undefined): string | undefined {
  if (accept === undefined) return undefined;
  const offered = new Map<string, number>();
  for (const part of accept.split(',')) {
    const [name = '', ...params] = part.split(';').map((p) => p.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    offered.set(name, q === undefined ? 1 : Number(q.slice(2)));
  }
  const wants = (name: string) => (offered.get(name) ?? offered.get('*') ?? 0) > 0;
  return CODERS.find(([name]) => wants(name))?.[0];
}

/** `body` coded with `encoding` (one chooseEncoding returned). */
export function compress(body: Buffer, encoding: string): Buffer {
  const coder = CODERS.find(([name]) => name === encoding)?.[1];
  if (coder === undefined) throw new Error(`no coder for ${encoding}`);
  return coder(body);
}

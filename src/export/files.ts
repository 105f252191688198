/**
 * Writes one exported table to a file: rows pulled from an iterator a row
 * group at a time (never the table in memory), under a temporary name with
 * the mirror's file mode from its first byte (db/file-modes.ts), fsynced,
 * then checked (read back: its SHA-256 and its row count must be what was
 * written) and only then renamed to its name. A failed write leaves nothing
 * under the name.
 *
 * Parquet: typed columns (src/export/tables.ts) written by ./parquet.ts.
 * NDJSON: one object a line, the same columns, times as ISO 8601 text, JSON
 * columns embedded as JSON (not as strings).
 */
import { createHash, type Hash } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { parquetMetadata } from 'hyparquet';
import { createPrivateFile } from '../../db/file-modes.js';
import { ParquetStream } from './parquet.js';
import type { ExportFormat, WrittenFile } from './plan.js';
import type { Cell, Column, ExportRecord, TableName } from './tables.js';

/** Bytes gathered before a write(2). */
const CHUNK_BYTES = 1024 * 1024;
/** Rows between two turns of the event loop: the daemon's status and metrics answer during an export. */
const YIELD_ROWS = 8_000;

class ExportCheckError extends Error {
  override name = 'ExportCheckError';
}

/** Bytes to a file descriptor, gathered into writes of CHUNK_BYTES, hashed and counted as they go: the file is never held whole. */
class FileSink {
  readonly hash: Hash = createHash('sha256');
  bytes = 0;
  private readonly buffer = Buffer.allocUnsafe(CHUNK_BYTES);
  private used = 0;

  constructor(private readonly fd: number) {}

  write(chunk: Uint8Array): void {
    if (this.used + chunk.length > CHUNK_BYTES) this.flush();
    if (chunk.length >= CHUNK_BYTES) this.send(chunk);
    else {
      this.buffer.set(chunk, this.used);
      this.used += chunk.length;
    }
  }

  /** Text as UTF-8, encoded straight into the buffer. */
  text(s: string): void {
    if (this.used + s.length * 3 > CHUNK_BYTES) this.flush();
    if (s.length * 3 > CHUNK_BYTES) this.send(Buffer.from(s));
    else this.used += this.buffer.write(s, this.used);
  }

  flush(): void {
    if (this.used === 0) return;
    this.send(this.buffer.subarray(0, this.used));
    this.used = 0;
  }

  private send(chunk: Uint8Array): void {
    this.hash.update(chunk);
    for (let done = 0; done < chunk.length;) done += writeSync(this.fd, chunk, done, chunk.length - done);
    this.bytes += chunk.length;
  }
}

async function writeParquet(fd: number, rows: Iterable<ExportRecord>, columns: readonly Column[], kv: Record<string, string>) {
  const sink = new FileSink(fd);
  const pq = new ParquetStream(columns, { kv, createdBy: 'user-mirror export' }, (chunk) => sink.write(chunk));
  for (const row of rows) {
    pq.append(row);
    if (pq.count % YIELD_ROWS === 0) await yieldToLoop();
  }
  pq.finish();
  sink.flush();
  return { rows: pq.count, hash: sink.hash.digest('hex'), bytes: sink.bytes };
}

function ndjsonValue(c: Column, v: Cell): string {
  if (v === null) return 'null';
  switch (c.kind) {
    case 'timestamp':
      return `"${new Date(Number(v)).toISOString()}"`;
    case 'date':
      return `"${new Date(Number(v) * 86_400_000).toISOString().slice(0, 10)}"`;
    case 'int64':
      return String(v);
    case 'json': {
      // The text as stored, unless it spans lines (a record keeps the whitespace it arrived with): then one line of it.
      const text = String(v);
      return /[\n\r]/.test(text) ? JSON.stringify(JSON.parse(text)) : text;
    }
    default:
      return JSON.stringify(v);
  }
}

async function writeNdjson(fd: number, rows: Iterable<ExportRecord>, columns: readonly Column[]) {
  const sink = new FileSink(fd);
  const keys = columns.map((c) => `${JSON.stringify(c.name)}:`);
  let count = 0;
  for (const row of rows) {
    let line = '{';
    for (let i = 0; i < columns.length; i++) {
      const c = columns[i] as Column;
      line += `${i === 0 ? '' : ','}${keys[i]}${ndjsonValue(c, row[c.name] ?? null)}`;
    }
    sink.text(`${line}}\n`);
    if (++count % YIELD_ROWS === 0) await yieldToLoop();
  }
  sink.flush();
  return { rows: count, hash: sink.hash.digest('hex'), bytes: sink.bytes };
}

/** Reads a file back: its SHA-256, and its rows (a Parquet footer's count, or NDJSON's lines). */
function readBack(path: string, format: ExportFormat): { sha256: string; rows: number; bytes: number } {
  const fd = openSync(path, 'r');
  try {
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(CHUNK_BYTES);
    let bytes = 0;
    let lines = 0;
    for (let n = readSync(fd, buf, 0, buf.length, null); n > 0; n = readSync(fd, buf, 0, buf.length, null)) {
      const chunk = buf.subarray(0, n);
      hash.update(chunk);
      bytes += n;
      if (format === 'ndjson') for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    }
    if (format === 'ndjson') return { sha256: hash.digest('hex'), rows: lines, bytes };
    const footer = footerOf(fd, bytes);
    return { sha256: hash.digest('hex'), rows: Number(parquetMetadata(footer).num_rows), bytes };
  } finally {
    closeSync(fd);
  }
}

/** The footer of a Parquet file: its metadata, their length and `PAR1`. */
function footerOf(fd: number, size: number): Uint8Array {
  if (size < 12) throw new ExportCheckError('file too short to be Parquet');
  const end = Buffer.allocUnsafe(8);
  readSync(fd, end, 0, 8, size - 8);
  const length = end.readUInt32LE(0);
  if (length + 12 > size) throw new ExportCheckError(`Parquet footer of ${length} bytes in a file of ${size}`);
  const footer = Buffer.allocUnsafe(length + 8);
  readSync(fd, footer, 0, footer.length, size - footer.length);
  return footer;
}

/**
 * Writes `rows` as `dir/file`, checked, and returns what the manifest says
 * of it. `kv`: key-value metadata for the Parquet footer.
 */
export async function writeTableFile(
  dir: string,
  table: TableName,
  file: string,
  format: ExportFormat,
  columns: readonly Column[],
  rows: Iterable<ExportRecord>,
  kv: Record<string, string> = {},
): Promise<WrittenFile> {
  const final = join(dir, file);
  const temp = join(dir, `.${file}.tmp-${process.pid}`);
  createPrivateFile(temp);
  try {
    const fd = openSync(temp, 'w');
    let wrote: { rows: number; hash: string; bytes: number };
    try {
      wrote = format === 'parquet' ? await writeParquet(fd, rows, columns, kv) : await writeNdjson(fd, rows, columns);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    const back = readBack(temp, format);
    if (back.sha256 !== wrote.hash || back.rows !== wrote.rows || back.bytes !== wrote.bytes)
      throw new ExportCheckError(
        `${file}: read back ${back.rows} rows, ${back.bytes} bytes, sha256 ${back.sha256.slice(0, 12)}…; wrote ${wrote.rows} rows, ${wrote.bytes} bytes, sha256 ${wrote.hash.slice(0, 12)}…`,
      );
    renameSync(temp, final);
    return { table, file, rows: wrote.rows, bytes: wrote.bytes, sha256: wrote.hash };
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}

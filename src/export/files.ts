/**
 * Writes one exported table to a file: rows pulled from an iterator a row
 * group at a time (never the table in memory), under a temporary name with
 * the mirror's file mode from its first byte (db/file-modes.ts), fsynced,
 * then checked (read back: its SHA-256 and its row count must be what was
 * written) and only then renamed to its name. A failed write leaves nothing
 * under the name.
 *
 * Parquet (hyparquet-writer): typed columns (src/export/tables.ts), zstd
 * compressed, row groups of at most ROW_GROUP_ROWS rows or
 * ROW_GROUP_BYTES of text. NDJSON: one object a line, the same columns,
 * times as ISO 8601 text, JSON columns embedded as JSON (not as strings).
 */
import { createHash, type Hash } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { constants as zlib, zstdCompressSync } from 'node:zlib';
import { parquetMetadata } from 'hyparquet';
import { ByteWriter, ParquetWriter, type SchemaElement } from 'hyparquet-writer';
import { createPrivateFile } from '../../db/file-modes.js';
import type { ExportFormat, WrittenFile } from './plan.js';
import type { Cell, Column, ExportRecord, TableName } from './tables.js';

/**
 * Rows of one row group at most: with ROW_GROUP_BYTES, what bounds the memory an export holds (a group is
 * held as columns and as encoded pages at once, and the garbage of the last ones waits for the GC).
 * Measured on 100,000 users (peak RSS, with the sync's V8 flags): 244 MB at 20,000 rows or 6 MB, 177 MB at
 * 10,000 or 3 MB, 166-170 MB at 8,000 or 2 MB (as fast), 161 MB at 5,000 or 1.5 MB (slower).
 */
const ROW_GROUP_ROWS = 8_000;
/** Text (records, bodies) of one row group at most, in characters: a group of large records ends early. */
const ROW_GROUP_BYTES = 2 * 1024 * 1024;
/** Columns whose values are ids, unique or nearly: written PLAIN, without a dictionary. */
const UNIQUE_IDS = new Set(['user_id', 'client_user_id', 'event_id']);

/**
 * zstd level 1, not the default 3: on 8,000 users' records, half the CPU (11.9 ms against 21.8 ms) for
 * the same size (819 KB against 822 KB of 6.5 MB); compression was an eighth of the export's time.
 */
const ZSTD_FAST = { params: { [zlib.ZSTD_c_compressionLevel]: 1 } };

/** Bytes gathered before a write(2). */
const CHUNK_BYTES = 1024 * 1024;

class ExportCheckError extends Error {
  override name = 'ExportCheckError';
}

/**
 * A hyparquet-writer sink that sends its bytes to a file descriptor as they
 * come, hashing and counting them: the file is never held whole.
 */
class FdWriter extends ByteWriter {
  readonly hash: Hash = createHash('sha256');

  constructor(private readonly fd: number) {
    super(CHUNK_BYTES * 2);
  }

  override ensure(size: number): void {
    if (this.index > CHUNK_BYTES) this.drain();
    super.ensure(size);
  }

  flush(): void {
    this.drain();
  }

  override finish(): void {
    this.drain();
  }

  private drain(): void {
    const chunk = new Uint8Array(this.buffer, 0, this.index);
    this.hash.update(chunk);
    for (let done = 0; done < chunk.length;) done += writeSync(this.fd, chunk, done, chunk.length - done);
    this.index = 0;
  }
}

/** The Parquet schema of a table: required columns REQUIRED, the others OPTIONAL; a list is a standard 3-level LIST. */
function parquetSchema(columns: readonly Column[]): SchemaElement[] {
  const schema: SchemaElement[] = [{ name: 'root', num_children: columns.length }];
  for (const c of columns) {
    const repetition_type = c.required === true ? 'REQUIRED' : 'OPTIONAL';
    switch (c.kind) {
      case 'string':
        schema.push({ name: c.name, type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type });
        break;
      case 'timestamp':
        schema.push({
          name: c.name,
          type: 'INT64',
          converted_type: 'TIMESTAMP_MILLIS',
          logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: true, unit: 'MILLIS' },
          repetition_type,
        });
        break;
      case 'date':
        schema.push({ name: c.name, type: 'INT32', converted_type: 'DATE', repetition_type });
        break;
      case 'int64':
        schema.push({ name: c.name, type: 'INT64', repetition_type });
        break;
      case 'boolean':
        schema.push({ name: c.name, type: 'BOOLEAN', repetition_type });
        break;
      case 'json':
        // Written as UTF8 text (the record's bytes, once) and annotated JSON in the footer: see writeParquet.
        schema.push({ name: c.name, type: 'BYTE_ARRAY', converted_type: 'UTF8', logical_type: { type: 'JSON' }, repetition_type });
        break;
      case 'list':
        schema.push(
          { name: c.name, converted_type: 'LIST', repetition_type, num_children: 1 },
          { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
          { name: 'element', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'REQUIRED' },
        );
        break;
    }
  }
  return schema;
}

/** A cell as the Parquet writer takes it: PLAIN text as its UTF-8 bytes. */
type ColumnValue = Cell | Uint8Array;

async function writeParquet(fd: number, rows: Iterable<ExportRecord>, columns: readonly Column[], kv: Record<string, string>) {
  const writer = new FdWriter(fd);
  const schema = parquetSchema(columns);
  const pq = new ParquetWriter({
    writer,
    schema,
    kvMetadata: Object.entries(kv).map(([key, value]) => ({ key, value })),
    createdBy: 'user-mirror export (hyparquet-writer)',
    // Node's own zstd (native) instead of the library's JavaScript Snappy: measured on 100,000 users, Snappy in
    // JavaScript was a fifth of the export's time; every Parquet reader named in docs/export.md reads ZSTD.
    codec: 'ZSTD',
    compressors: { ZSTD: (input: Uint8Array) => zstdCompressSync(input, ZSTD_FAST) },
  });
  const spec = columns.map((c) => ({
    name: c.name,
    // The record is unique per row: a dictionary never pays, and min/max of JSON text says nothing. Ids are
    // (nearly) unique too: the dictionary the library tries first is built and thrown away for each page.
    ...(c.kind === 'json' || UNIQUE_IDS.has(c.name) ? { encoding: 'PLAIN' as const } : {}),
    // Min/max where a reader skips row groups by them (times, dates, numbers); of text and lists they cost more than they give.
    ...(c.kind === 'json' || c.kind === 'string' || c.kind === 'list' ? { statistics: false } : {}),
  }));
  // The PLAIN text columns (records, ids) handed over as UTF-8 bytes: Buffer.from is about twice as fast as the
  // library's TextEncoder on a record and takes small strings from Node's pool. Not the dictionary columns: a
  // dictionary is keyed by value, and bytes are distinct objects.
  const asBytes = spec.map(
    (s) => s.encoding === 'PLAIN' && columns.some((c) => c.name === s.name && (c.kind === 'json' || c.kind === 'string')),
  );
  // Columns built as the rows come, the text of PLAIN columns turned into bytes at once: a row's object and
  // its strings die young (a scavenge), where a row group held as rows survived into the old generation,
  // which the export's bound (EXPORT_V8_FLAGS) makes V8 collect again and again.
  const names = columns.map((c) => c.name);
  const sized = columns.map((c) => c.kind === 'json');
  let data: ColumnValue[][] = spec.map(() => []);
  let inGroup = 0;
  let size = 0;
  let count = 0;
  const flush = () => {
    const group = data;
    void pq.write({ columnData: spec.map((s, i) => ({ ...s, data: group[i] ?? [] })), rowGroupSize: inGroup });
    count += inGroup;
    data = spec.map(() => []);
    inGroup = 0;
    size = 0;
  };
  for (const row of rows) {
    for (let i = 0; i < names.length; i++) {
      const v = row[names[i] as string] ?? null;
      const column = data[i] as ColumnValue[];
      if (typeof v === 'string') {
        if (sized[i] === true) size += v.length;
        column.push(asBytes[i] === true ? Buffer.from(v) : v);
      } else column.push(v);
    }
    if (++inGroup >= ROW_GROUP_ROWS || size >= ROW_GROUP_BYTES) {
      flush();
      // A row group at a time, the event loop runs: the daemon's status and metrics answer during an export.
      await yieldToLoop();
    }
  }
  if (inGroup > 0) flush();
  // An empty table is a valid file with its columns and no row group.
  if (count === 0) void pq.write({ columnData: spec.map((s) => ({ ...s, data: [] })), rowGroupSize: 1 });
  // hyparquet-writer's JSON type JSON.stringify()s each value, so a record given as text would be stored as a JSON
  // string of it (read back double-encoded); given as UTF8 text it is stored once, byte for byte. The annotation
  // that makes readers type the column JSON is the footer's, written by finish(): set it there.
  for (const element of schema) if (element.logical_type?.type === 'JSON') element.converted_type = 'JSON';
  void pq.finish();
  return { rows: count, hash: writer.hash.digest('hex'), bytes: writer.offset };
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
  const hash = createHash('sha256');
  const keys = columns.map((c) => `${JSON.stringify(c.name)}:`);
  let pending: string[] = [];
  let pendingSize = 0;
  let bytes = 0;
  let count = 0;
  const drain = () => {
    const chunk = Buffer.from(pending.join(''));
    hash.update(chunk);
    for (let done = 0; done < chunk.length;) done += writeSync(fd, chunk, done, chunk.length - done);
    bytes += chunk.length;
    pending = [];
    pendingSize = 0;
  };
  for (const row of rows) {
    let line = '{';
    for (let i = 0; i < columns.length; i++) {
      const c = columns[i] as Column;
      line += `${i === 0 ? '' : ','}${keys[i]}${ndjsonValue(c, row[c.name] ?? null)}`;
    }
    line += '}\n';
    pending.push(line);
    pendingSize += line.length;
    count++;
    if (pendingSize >= CHUNK_BYTES) {
      drain();
      if (count % ROW_GROUP_ROWS < 100) await yieldToLoop();
    }
  }
  drain();
  return { rows: count, hash: hash.digest('hex'), bytes };
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

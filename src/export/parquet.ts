/**
 * A streaming Parquet writer for the export's column kinds (./tables.ts),
 * and nothing else: each value is encoded into its column's open page as
 * its row arrives, a page is zstd-compressed when it holds PAGE_BYTES, and a
 * row group's compressed pages are written out when it holds
 * ROW_GROUP_ROWS rows or ROW_GROUP_BYTES. No row, no row group and no
 * column of JavaScript values is ever held: text goes from the row's string
 * straight into a reused page buffer.
 *
 * Why not hyparquet-writer (which the export used first): it takes a row
 * group as arrays of values, so every row of a group survived into V8's old
 * generation, and it converts, slices, tries a dictionary and copies each
 * page several times. At 100,000 users its encoding was a sixth of the
 * export's CPU and the garbage it left a fifth (bench/README.md,
 * bench:export). The format is small when the types are few: PLAIN values,
 * RLE levels, data pages v1, statistics for the numeric columns, and the
 * footer in Thrift's compact protocol, all per the Parquet format
 * specification (parquet.thrift). What it writes is read back by DuckDB in
 * the tests and its footer by `hyparquet` after each write (./files.ts).
 *
 * Layout of a column:
 * - text and JSON: BYTE_ARRAY, annotated UTF8/STRING or JSON (the text once,
 *   never a JSON string of it);
 * - timestamp: INT64 TIMESTAMP(MILLIS, UTC); date: INT32 DATE; int64: INT64;
 *   boolean: BOOLEAN, bit-packed;
 * - list (a user's sources): the standard three-level LIST of required UTF8
 *   elements.
 * Required columns have no definition levels; optional ones a level per row
 * (0 for NULL); the list a repetition and a definition level per element
 * (and one pair for an empty list).
 */
import { constants as zlib, zstdCompressSync } from 'node:zlib';
import type { Cell, Column, ExportRecord } from './tables.js';

/** Uncompressed bytes of a column's page at most (a page ends after the row that reaches it). */
const PAGE_BYTES = 1024 * 1024;
/** Rows of a row group at most: a reader's unit of parallel work and of skipping by statistics. */
const ROW_GROUP_ROWS = 65_536;
/**
 * Uncompressed bytes of a row group at most: its compressed pages are held until the group ends (a
 * column's pages must be contiguous in the file), about an eighth of this for records. A whole export of
 * 1,000,000 users peaks at 166 MB of RSS with 24 MB, 181 MB with 48.
 */
const ROW_GROUP_BYTES = 24 * 1024 * 1024;

/**
 * zstd level 1, not the default 3: on 8,000 users' records, half the CPU (11.9 ms against 21.8 ms) for
 * the same size (819 KB against 822 KB of 6.5 MB).
 */
const ZSTD_FAST = { params: { [zlib.ZSTD_c_compressionLevel]: 1 } };

// parquet.thrift's enums: only the members written here.
const PHYSICAL = { BOOLEAN: 0, INT32: 1, INT64: 2, BYTE_ARRAY: 6 } as const;
const REPETITION = { REQUIRED: 0, OPTIONAL: 1, REPEATED: 2 } as const;
const CONVERTED = { UTF8: 0, LIST: 3, DATE: 6, TIMESTAMP_MILLIS: 9, JSON: 19 } as const;
const ENCODING = { PLAIN: 0, RLE: 3 } as const;
const CODEC_ZSTD = 6;
const PAGE_TYPE_DATA = 0;

/** Thrift compact protocol type ids (field headers, list headers). */
const T = { TRUE: 1, FALSE: 2, I16: 4, I32: 5, I64: 6, BINARY: 8, LIST: 9, STRUCT: 12 } as const;

/** A byte buffer that grows; reused page after page. */
class Bytes {
  buf: Buffer;
  len = 0;

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }

  byte(b: number): void {
    this.room(1);
    this.buf[this.len++] = b;
  }

  /** A PLAIN BYTE_ARRAY: 4-byte length, then the UTF-8 bytes. */
  text(s: string): void {
    this.room(4 + s.length * 3);
    const n = this.buf.write(s, this.len + 4);
    this.buf.writeUInt32LE(n, this.len);
    this.len += 4 + n;
  }

  append(bytes: Uint8Array): void {
    this.room(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }

  int32(n: number): void {
    this.room(4);
    this.buf.writeInt32LE(n, this.len);
    this.len += 4;
  }

  /** A safe integer as INT64, little-endian, without a BigInt. */
  int64(n: number): void {
    this.room(8);
    const hi = Math.floor(n / 4294967296);
    this.buf.writeUInt32LE((n - hi * 4294967296) >>> 0, this.len);
    this.buf.writeInt32LE(hi, this.len + 4);
    this.len += 8;
  }

  varint(n: number): void {
    while (n >= 0x80) {
      this.byte((n % 0x80) | 0x80);
      n = Math.floor(n / 0x80);
    }
    this.byte(n);
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}

/** Thrift's compact protocol, the parts Parquet's page headers and footer use. */
class Compact {
  readonly out = new Bytes(256);
  private last = 0;
  private readonly stack: number[] = [];

  private field(id: number, type: number): void {
    const delta = id - this.last;
    if (delta > 0 && delta <= 15) this.out.byte((delta << 4) | type);
    else {
      this.out.byte(type);
      this.out.varint(zigzag(id));
    }
    this.last = id;
  }

  i32(id: number, v: number): this {
    this.field(id, T.I32);
    this.out.varint(zigzag(v));
    return this;
  }

  i64(id: number, v: number): this {
    this.field(id, T.I64);
    this.out.varint(zigzag(v));
    return this;
  }

  i16(id: number, v: number): this {
    this.field(id, T.I16);
    this.out.varint(zigzag(v));
    return this;
  }

  bool(id: number, v: boolean): this {
    this.field(id, v ? T.TRUE : T.FALSE);
    return this;
  }

  binary(id: number, v: string | Uint8Array): this {
    this.field(id, T.BINARY);
    this.rawBinary(v);
    return this;
  }

  struct(id: number, body: (w: this) => void): this {
    this.field(id, T.STRUCT);
    this.begin();
    body(this);
    this.end();
    return this;
  }

  list<V>(id: number, elementType: number, items: readonly V[], each: (item: V) => void): this {
    this.field(id, T.LIST);
    if (items.length < 15) this.out.byte((items.length << 4) | elementType);
    else {
      this.out.byte(0xf0 | elementType);
      this.out.varint(items.length);
    }
    for (const item of items) {
      if (elementType !== T.STRUCT) each(item);
      else {
        this.begin();
        each(item);
        this.end();
      }
    }
    return this;
  }

  /** A list element that is not a struct. */
  rawI32(v: number): void {
    this.out.varint(zigzag(v));
  }

  rawBinary(v: string | Uint8Array): void {
    const bytes = typeof v === 'string' ? Buffer.from(v) : v;
    this.out.varint(bytes.length);
    this.out.append(bytes);
  }

  /** Ends the top-level struct: its bytes. */
  done(): Buffer {
    this.out.byte(0);
    return this.out.bytes();
  }

  private begin(): void {
    this.stack.push(this.last);
    this.last = 0;
  }

  private end(): void {
    this.out.byte(0);
    this.last = this.stack.pop() ?? 0;
  }
}

function zigzag(n: number): number {
  return n >= 0 ? n * 2 : -n * 2 - 1;
}

/** Levels of bit width 1 into `out`: their 4-byte length, then RLE runs (the RLE/bit-packing hybrid, runs only). */
function writeLevels(levels: Bytes, out: Bytes): void {
  const start = out.len;
  out.room(4);
  out.len += 4;
  const l = levels.buf;
  for (let i = 0; i < levels.len;) {
    const v = l[i] as number;
    let j = i + 1;
    while (j < levels.len && l[j] === v) j++;
    out.varint((j - i) * 2);
    out.byte(v);
    i = j;
  }
  out.buf.writeUInt32LE(out.len - start - 4, start);
}

interface ChunkMeta {
  offset: number;
  values: number;
  uncompressed: number;
  compressed: number;
  nulls: number;
  min: number;
  max: number;
}

/** One column: its open page (values and levels) and the compressed pages of the open row group. */
class ColumnEncoder {
  readonly physical: number;
  readonly path: string[];
  private readonly optional: boolean;
  private readonly list: boolean;
  /** Min/max kept and written (times, dates, integers): what a reader skips row groups by. */
  private readonly ranged: boolean;
  /**
   * The open page's values, its levels, the page as compressed (levels and values together), and the row
   * group's pages so far: buffers reused page after page and group after group. A buffer per page would outlive
   * many scavenges and pile up in the old generation as external memory until a full GC.
   */
  private readonly values: Bytes;
  private readonly defs = new Bytes(1024);
  private readonly reps = new Bytes(1024);
  private readonly page = new Bytes(1024);
  private readonly pages = new Bytes(64 * 1024);
  private entries = 0;
  private chunk: ChunkMeta = emptyChunk();

  constructor(private readonly column: Column) {
    this.optional = column.required !== true;
    this.list = column.kind === 'list';
    // A list's levels here are those of a required list (definition 0: empty, 1: an element).
    if (this.list && this.optional) throw new TypeError(`parquet: list column ${column.name} must be required`);
    this.ranged = column.kind === 'timestamp' || column.kind === 'date' || column.kind === 'int64';
    this.physical = physicalOf(column);
    this.path = this.list ? [column.name, 'list', 'element'] : [column.name];
    // A page's worth and a value more: untouched, the room costs no memory.
    this.values = new Bytes(column.kind === 'json' || column.kind === 'string' || this.list ? PAGE_BYTES + 64 * 1024 : 64 * 1024);
  }

  add(v: Cell): void {
    if (v === null) {
      if (!this.optional) throw new TypeError(`parquet: column ${this.column.name} is required, got NULL`);
      this.defs.byte(0);
      this.entries++;
      this.chunk.nulls++;
      return;
    }
    if (this.list) return this.addList(v);
    if (this.optional) this.defs.byte(1);
    this.entries++;
    switch (this.column.kind) {
      case 'string':
      case 'json':
        if (typeof v !== 'string') throw this.wrong(v);
        this.values.text(v);
        return;
      case 'timestamp':
      case 'int64':
        if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw this.wrong(v);
        this.values.int64(v);
        this.bound(v);
        return;
      case 'date':
        if (typeof v !== 'number' || !Number.isInteger(v)) throw this.wrong(v);
        this.values.int32(v);
        this.bound(v);
        return;
      case 'boolean':
        if (typeof v !== 'boolean') throw this.wrong(v);
        this.values.byte(v ? 1 : 0);
        return;
      case 'list':
        throw this.wrong(v);
    }
  }

  private bound(v: number): void {
    if (v < this.chunk.min) this.chunk.min = v;
    if (v > this.chunk.max) this.chunk.max = v;
  }

  private addList(v: Cell): void {
    if (!Array.isArray(v)) throw this.wrong(v);
    if (v.length === 0) {
      this.reps.byte(0);
      this.defs.byte(0);
      this.entries++;
      return;
    }
    for (let i = 0; i < v.length; i++) {
      this.reps.byte(i === 0 ? 0 : 1);
      this.defs.byte(1);
      this.values.text(v[i] as string);
      this.entries++;
    }
  }

  private wrong(v: Cell): TypeError {
    return new TypeError(`parquet: column ${this.column.name} (${this.column.kind}) got ${Array.isArray(v) ? 'a list' : typeof v}`);
  }

  /** Uncompressed bytes of the open page. */
  get pageBytes(): number {
    return this.values.len + this.defs.len;
  }

  /** Ends the open page: levels and values compressed together behind a page header (data page v1). */
  closePage(): void {
    if (this.entries === 0) return;
    let body = this.values.bytes();
    const boolean = this.column.kind === 'boolean';
    if (this.optional || this.list || boolean) {
      this.page.len = 0;
      if (this.list) writeLevels(this.reps, this.page);
      if (this.optional || this.list) writeLevels(this.defs, this.page);
      if (boolean) packBits(this.values, this.page);
      else this.page.append(body);
      body = this.page.bytes();
    }
    const compressed = zstdCompressSync(body, ZSTD_FAST);
    const header = new Compact()
      .i32(1, PAGE_TYPE_DATA)
      .i32(2, body.length)
      .i32(3, compressed.length)
      .struct(5, (h) => h.i32(1, this.entries).i32(2, ENCODING.PLAIN).i32(3, ENCODING.RLE).i32(4, ENCODING.RLE))
      .done();
    this.pages.append(header);
    this.pages.append(compressed);
    this.chunk.values += this.entries;
    this.chunk.uncompressed += header.length + body.length;
    this.chunk.compressed += header.length + compressed.length;
    this.values.len = 0;
    this.defs.len = 0;
    this.reps.len = 0;
    this.entries = 0;
  }

  /** Ends the row group's chunk of this column: its pages go to `emit` (which must not keep them), and the footer's facts are returned. */
  closeChunk(offset: number, emit: (pages: Buffer) => void): ChunkMeta {
    this.closePage();
    const meta = { ...this.chunk, offset };
    emit(this.pages.bytes());
    this.pages.len = 0;
    this.chunk = emptyChunk();
    return meta;
  }

  /** The footer's Statistics of a chunk: its NULLs, and min/max where kept. */
  statistics(w: Compact, meta: ChunkMeta): void {
    if (!this.list) w.i64(3, meta.nulls);
    if (!this.ranged || meta.min > meta.max) return;
    // Encoded as the column's values are.
    const bound = (n: number) => {
      const b = new Bytes(8);
      if (this.column.kind === 'date') b.int32(n);
      else b.int64(n);
      return b.bytes();
    };
    w.binary(5, bound(meta.max)).binary(6, bound(meta.min));
  }
}

function emptyChunk(): ChunkMeta {
  return { offset: 0, values: 0, uncompressed: 0, compressed: 0, nulls: 0, min: Infinity, max: -Infinity };
}

/** BOOLEAN PLAIN into `out`: one bit a value, least significant first. */
function packBits(flags: Bytes, out: Bytes): void {
  const n = Math.ceil(flags.len / 8);
  out.room(n);
  out.buf.fill(0, out.len, out.len + n);
  for (let i = 0; i < flags.len; i++)
    if (flags.buf[i] === 1) out.buf[out.len + (i >> 3)] = (out.buf[out.len + (i >> 3)] as number) | (1 << (i & 7));
  out.len += n;
}

function physicalOf(c: Column): number {
  switch (c.kind) {
    case 'timestamp':
    case 'int64':
      return PHYSICAL.INT64;
    case 'date':
      return PHYSICAL.INT32;
    case 'boolean':
      return PHYSICAL.BOOLEAN;
    default:
      return PHYSICAL.BYTE_ARRAY;
  }
}

type Element = (w: Compact) => void;

/** parquet.thrift's LogicalType union: the member set, with its (here empty or constant) struct. */
const LOGICAL = {
  STRING: (l: Compact) => l.struct(1, () => {}),
  LIST: (l: Compact) => l.struct(3, () => {}),
  DATE: (l: Compact) => l.struct(6, () => {}),
  TIMESTAMP_MILLIS_UTC: (l: Compact) => l.struct(8, (ts) => ts.bool(1, true).struct(2, (unit) => unit.struct(1, () => {}))),
  JSON: (l: Compact) => l.struct(12, () => {}),
};

/** A SchemaElement: a leaf when `physical` is given, else a group of `children`. */
function element(
  name: string,
  repetition: number,
  type: { physical?: number; children?: number; converted?: number; logical?: (l: Compact) => void },
): Element {
  return (e) => {
    if (type.physical !== undefined) e.i32(1, type.physical);
    e.i32(3, repetition).binary(4, name);
    if (type.children !== undefined) e.i32(5, type.children);
    if (type.converted !== undefined) e.i32(6, type.converted);
    if (type.logical !== undefined) e.struct(10, type.logical);
  };
}

/** The schema's elements, depth first, as the footer lists them. */
function writeSchema(w: Compact, columns: readonly Column[]): void {
  const elements: Element[] = [(e) => e.binary(4, 'root').i32(5, columns.length)];
  const text = { physical: PHYSICAL.BYTE_ARRAY, converted: CONVERTED.UTF8, logical: LOGICAL.STRING };
  for (const c of columns) {
    const repetition = c.required === true ? REPETITION.REQUIRED : REPETITION.OPTIONAL;
    switch (c.kind) {
      case 'string':
        elements.push(element(c.name, repetition, text));
        break;
      case 'json':
        elements.push(element(c.name, repetition, { physical: PHYSICAL.BYTE_ARRAY, converted: CONVERTED.JSON, logical: LOGICAL.JSON }));
        break;
      case 'timestamp':
        elements.push(
          element(c.name, repetition, {
            physical: PHYSICAL.INT64,
            converted: CONVERTED.TIMESTAMP_MILLIS,
            logical: LOGICAL.TIMESTAMP_MILLIS_UTC,
          }),
        );
        break;
      case 'date':
        elements.push(element(c.name, repetition, { physical: PHYSICAL.INT32, converted: CONVERTED.DATE, logical: LOGICAL.DATE }));
        break;
      case 'int64':
        elements.push(element(c.name, repetition, { physical: PHYSICAL.INT64 }));
        break;
      case 'boolean':
        elements.push(element(c.name, repetition, { physical: PHYSICAL.BOOLEAN }));
        break;
      case 'list':
        elements.push(
          element(c.name, repetition, { children: 1, converted: CONVERTED.LIST, logical: LOGICAL.LIST }),
          element('list', REPETITION.REPEATED, { children: 1 }),
          element('element', REPETITION.REQUIRED, text),
        );
        break;
    }
  }
  w.list(2, T.STRUCT, elements, (write) => write(w));
}

interface RowGroupMeta {
  rows: number;
  offset: number;
  chunks: ChunkMeta[];
}

export interface ParquetOptions {
  /** The footer's key-value metadata. */
  kv?: Record<string, string>;
  createdBy: string;
}

/**
 * Rows in, Parquet bytes out through `out`, in file order: `append` each
 * row, then `finish` once (the footer). `out` must write or copy a chunk
 * before it returns: the writer reuses its buffers.
 */
export class ParquetStream {
  private readonly encoders: ColumnEncoder[];
  private readonly names: string[];
  private readonly groups: RowGroupMeta[] = [];
  private offset = 0;
  private rows = 0;
  private groupRows = 0;
  private groupBytes = 0;

  constructor(
    private readonly columns: readonly Column[],
    private readonly options: ParquetOptions,
    private readonly out: (chunk: Buffer) => void,
  ) {
    this.encoders = columns.map((c) => new ColumnEncoder(c));
    this.names = columns.map((c) => c.name);
    this.emit(Buffer.from('PAR1'));
  }

  /** Rows appended so far. */
  get count(): number {
    return this.rows;
  }

  append(row: ExportRecord): void {
    for (let i = 0; i < this.encoders.length; i++) {
      const encoder = this.encoders[i] as ColumnEncoder;
      const before = encoder.pageBytes;
      encoder.add(row[this.names[i] as string] ?? null);
      const after = encoder.pageBytes;
      this.groupBytes += after - before;
      if (after >= PAGE_BYTES) encoder.closePage();
    }
    this.rows++;
    if (++this.groupRows >= ROW_GROUP_ROWS || this.groupBytes >= ROW_GROUP_BYTES) this.closeGroup();
  }

  /** Writes the last row group and the footer. An empty table is a file of its columns and no row group. */
  finish(): void {
    if (this.groupRows > 0) this.closeGroup();
    const w = new Compact();
    w.i32(1, 2);
    writeSchema(w, this.columns);
    w.i64(3, this.rows);
    w.list(4, T.STRUCT, this.groups, (g) => this.writeGroup(w, g));
    const kv = Object.entries(this.options.kv ?? {});
    if (kv.length > 0) w.list(5, T.STRUCT, kv, ([key, value]) => w.binary(1, key).binary(2, value));
    w.binary(6, this.options.createdBy);
    const footer = w.done();
    const tail = Buffer.allocUnsafe(8);
    tail.writeUInt32LE(footer.length, 0);
    tail.write('PAR1', 4);
    this.emit(Buffer.from(footer));
    this.emit(tail);
  }

  private closeGroup(): void {
    const offset = this.offset;
    const chunks: ChunkMeta[] = [];
    for (const encoder of this.encoders) {
      chunks.push(encoder.closeChunk(this.offset, (pages) => this.emit(pages)));
    }
    this.groups.push({ rows: this.groupRows, offset, chunks });
    this.groupRows = 0;
    this.groupBytes = 0;
  }

  private writeGroup(w: Compact, g: RowGroupMeta): void {
    w.list(
      1,
      T.STRUCT,
      g.chunks.map((meta, i) => ({ meta, encoder: this.encoders[i] as ColumnEncoder })),
      ({ meta, encoder }) =>
        w.i64(2, meta.offset).struct(3, (m) => {
          m.i32(1, encoder.physical);
          m.list(2, T.I32, [ENCODING.PLAIN, ENCODING.RLE], (e) => m.rawI32(e));
          m.list(3, T.BINARY, encoder.path, (p) => m.rawBinary(p));
          m.i32(4, CODEC_ZSTD).i64(5, meta.values).i64(6, meta.uncompressed).i64(7, meta.compressed).i64(9, meta.offset);
          m.struct(12, (s) => encoder.statistics(s, meta));
        }),
    );
    const total = (k: 'uncompressed' | 'compressed') => g.chunks.reduce((n, c) => n + c[k], 0);
    w.i64(2, total('uncompressed')).i64(3, g.rows).i64(5, g.offset).i64(6, total('compressed')).i16(7, this.groups.indexOf(g));
  }

  private emit(chunk: Buffer): void {
    this.offset += chunk.length;
    this.out(chunk);
  }
}

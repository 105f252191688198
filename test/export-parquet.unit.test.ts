/**
 * The export's Parquet writer (src/export/parquet.ts) read back by another
 * reader, hyparquet (pure JavaScript; DuckDB reads the export's files in
 * test/export.test.ts): every kind of column, NULLs, empty and long lists,
 * text beyond the BMP, values at their types' ends, pages and row groups
 * cut as the rows come, and the footer's statistics.
 */
import { zstdDecompressSync } from 'node:zlib';
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { describe, expect, it } from 'vitest';
import { ParquetStream } from '../src/export/parquet.js';
import type { Column, ExportRecord } from '../src/export/tables.js';

const COLUMNS: Column[] = [
  { name: 'id', kind: 'int64', required: true },
  { name: 'name', kind: 'string' },
  { name: 'at', kind: 'timestamp' },
  { name: 'born', kind: 'date' },
  { name: 'flag', kind: 'boolean', required: true },
  { name: 'tags', kind: 'list', required: true },
  { name: 'doc', kind: 'json' },
];

function write(columns: readonly Column[], rows: Iterable<ExportRecord>): { bytes: Buffer; count: number } {
  const chunks: Buffer[] = [];
  const pq = new ParquetStream(columns, { createdBy: 'test', kv: { 'user_mirror.cursor': '42' } }, (c) => chunks.push(Buffer.from(c)));
  for (const row of rows) pq.append(row);
  pq.finish();
  return { bytes: Buffer.concat(chunks), count: pq.count };
}

/** The file's bytes as an ArrayBuffer of their own, as hyparquet takes them. */
const own = (bytes: Buffer): ArrayBuffer => new Uint8Array(bytes).buffer;

async function read(bytes: Buffer): Promise<Record<string, unknown>[]> {
  return parquetReadObjects({ file: own(bytes), compressors: { ZSTD: (input: Uint8Array) => new Uint8Array(zstdDecompressSync(input)) } });
}

function row(i: number): ExportRecord {
  return {
    id: i === 3 ? Number.MAX_SAFE_INTEGER : i,
    name: i % 5 === 0 ? null : i % 7 === 0 ? `名前 ${i} 🧪` : `n${i}`,
    at: i % 3 === 0 ? null : i === 1 ? -86_400_000 : Date.UTC(2026, 0, 1) + i,
    born: i % 4 === 0 ? null : i - 10,
    flag: i % 2 === 0,
    tags: i % 6 === 0 ? [] : i % 6 === 1 ? ['oura'] : ['garmin', `s${i}`],
    doc: i % 9 === 0 ? null : JSON.stringify({ i, text: 'x'.repeat(i % 50) }),
  };
}

describe('the export Parquet writer', () => {
  it('writes every column kind so another reader gets the same values back', async () => {
    const rows = Array.from({ length: 200 }, (_, i) => row(i));
    const { bytes, count } = write(COLUMNS, rows);
    expect(count).toBe(200);
    const back = await read(bytes);
    expect(back).toHaveLength(200);
    for (const [i, r] of rows.entries()) {
      const got = back[i] as Record<string, unknown>;
      expect(got.id, `row ${i}`).toBe(BigInt(r.id as number));
      expect(got.name, `row ${i}`).toBe(r.name);
      expect(got.at, `row ${i}`).toEqual(r.at === null ? null : new Date(r.at as number));
      expect(got.born, `row ${i}`).toEqual(r.born === null ? null : new Date((r.born as number) * 86_400_000));
      expect(got.flag, `row ${i}`).toBe(r.flag);
      expect(got.tags, `row ${i}`).toEqual(r.tags);
      expect(got.doc, `row ${i}`).toEqual(r.doc === null ? null : JSON.parse(r.doc as string));
    }
  });

  it('annotates the types in the footer: UTF8, JSON, TIMESTAMP(MILLIS, UTC), DATE, a three-level LIST; keeps its key-values', () => {
    const { bytes } = write(COLUMNS, [row(1)]);
    const meta = parquetMetadata(own(bytes));
    const byName = Object.fromEntries(meta.schema.map((e) => [e.name, e]));
    expect(byName.name).toMatchObject({ type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' });
    expect(byName.doc).toMatchObject({ type: 'BYTE_ARRAY', converted_type: 'JSON', logical_type: { type: 'JSON' } });
    expect(byName.at).toMatchObject({ type: 'INT64', logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: true, unit: 'MILLIS' } });
    expect(byName.born).toMatchObject({ type: 'INT32', converted_type: 'DATE' });
    expect(byName.tags).toMatchObject({ converted_type: 'LIST', repetition_type: 'REQUIRED', num_children: 1 });
    expect(byName.list).toMatchObject({ repetition_type: 'REPEATED' });
    expect(byName.element).toMatchObject({ type: 'BYTE_ARRAY', repetition_type: 'REQUIRED' });
    expect(meta.key_value_metadata).toEqual([{ key: 'user_mirror.cursor', value: '42' }]);
    expect(meta.created_by).toBe('test');
  });

  it('cuts pages and row groups as the rows come, and their statistics bound each group', async () => {
    const big = 'y'.repeat(40_000);
    const rows = function* () {
      for (let i = 0; i < 70_000; i++) yield { ...row(i), doc: i % 1000 === 1 ? JSON.stringify({ big }) : null };
    };
    const { bytes, count } = write(COLUMNS, rows());
    expect(count).toBe(70_000);
    const meta = parquetMetadata(own(bytes));
    expect(meta.row_groups.length).toBeGreaterThan(1);
    expect(meta.row_groups.reduce((n, g) => n + Number(g.num_rows), 0)).toBe(70_000);
    const first = meta.row_groups[0]?.columns.find((c) => c.meta_data?.path_in_schema[0] === 'at')?.meta_data?.statistics;
    expect(first?.min_value).toEqual(new Date(-86_400_000));
    expect(first?.null_count).toBe(BigInt(Math.ceil(Number(meta.row_groups[0]?.num_rows) / 3)));
    const back = await read(bytes);
    expect(back).toHaveLength(70_000);
    expect(back[69_999]).toMatchObject({ id: 69_999n, tags: ['garmin', 's69999'] });
    expect(back[1001]?.doc).toEqual({ big });
  });

  it('writes a table without rows as a file of its columns and no row group', async () => {
    const { bytes, count } = write(COLUMNS, []);
    expect(count).toBe(0);
    const meta = parquetMetadata(own(bytes));
    expect(meta.row_groups).toEqual([]);
    expect(Number(meta.num_rows)).toBe(0);
    expect(await read(bytes)).toEqual([]);
  });

  it('refuses a value of the wrong kind or a NULL where a column is required, naming the column', () => {
    expect(() => write(COLUMNS, [{ ...row(1), at: '2026-01-01' }])).toThrow(/column at \(timestamp\) got string/);
    expect(() => write(COLUMNS, [{ ...row(1), id: null }])).toThrow(/column id is required, got NULL/);
    expect(() => write(COLUMNS, [{ ...row(1), tags: 'oura' }])).toThrow(/column tags \(list\) got string/);
    expect(() => write(COLUMNS, [{ ...row(1), id: 1.5 }])).toThrow(/column id \(int64\) got number/);
  });
});

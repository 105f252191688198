import { describe, expect, it } from 'vitest';
import {
  EXPORT_V8_FLAGS,
  MAX_CHECK_CONNECTIONS,
  missingSyncEnv,
  missingSyncFlags,
  SYNC_V8_FLAGS,
  syncConnections,
  syncEnv,
  syncExecArgv,
} from '../src/sync/process-settings.js';

describe('the sync process flags', () => {
  it("adds the sync's V8 flags to the parent's, without its debugger port", () => {
    expect(syncExecArgv(['--enable-source-maps', '--inspect=9229'], '')).toEqual(['--enable-source-maps', ...SYNC_V8_FLAGS]);
  });

  it("keeps an operator's own young-generation size, in either spelling", () => {
    expect(syncExecArgv(['--max-semi-space-size=8'], '')).toEqual(['--max-semi-space-size=8']);
    expect(syncExecArgv(['--max_semi_space_size=8'], '')).toEqual(['--max_semi_space_size=8']);
  });

  it("counts a size set in NODE_OPTIONS as the operator's, which a command-line flag would override", () => {
    expect(syncExecArgv([], '--max-old-space-size=512 --max-semi-space-size=8')).toEqual([]);
    expect(missingSyncFlags([], '--enable-source-maps')).toEqual([...SYNC_V8_FLAGS]);
    expect(missingSyncFlags(['--max-semi-space-size=2'], undefined)).toEqual([]);
  });

  it("gives an export the sync's flags and a bounded old generation, an operator's own size kept", () => {
    expect(missingSyncFlags([], undefined, EXPORT_V8_FLAGS)).toEqual(['--max-semi-space-size=2', '--max-old-space-size=128']);
    expect(missingSyncFlags(['--max_old_space_size=512'], undefined, EXPORT_V8_FLAGS)).toEqual(['--max-semi-space-size=2']);
    expect(missingSyncFlags([], '--max-old-space-size=512', EXPORT_V8_FLAGS)).toEqual(['--max-semi-space-size=2']);
  });
});

describe('the sync process environment', () => {
  it("adds glibc's arena limit to the parent's environment, which it keeps", () => {
    expect(missingSyncEnv({ PATH: '/bin' })).toEqual({ MALLOC_ARENA_MAX: '2' });
    expect(syncEnv({ PATH: '/bin', MIRROR_DB: '/x/m.db' })).toEqual({ PATH: '/bin', MIRROR_DB: '/x/m.db', MALLOC_ARENA_MAX: '2' });
  });

  it("keeps an operator's own arena limit, as MALLOC_ARENA_MAX or in GLIBC_TUNABLES", () => {
    expect(missingSyncEnv({ MALLOC_ARENA_MAX: '8' })).toEqual({});
    expect(syncEnv({ MALLOC_ARENA_MAX: '8' })).toEqual({ MALLOC_ARENA_MAX: '8' });
    expect(missingSyncEnv({ GLIBC_TUNABLES: 'glibc.malloc.trim_threshold=0:glibc.malloc.arena_max=1' })).toEqual({});
    expect(missingSyncEnv({ GLIBC_TUNABLES: 'glibc.malloc.trim_threshold=0' })).toEqual({ MALLOC_ARENA_MAX: '2' });
  });
});

describe('the connections of a sync', () => {
  it('open one per page and per check in flight, checks sharing at most MAX_CHECK_CONNECTIONS', () => {
    expect(syncConnections(8, 4, 16)).toBe(16);
    expect(syncConnections(8, 32, 16)).toBe(32);
    expect(syncConnections(100, 4, 16)).toBe(100);
    expect(syncConnections(8, 4, 256)).toBe(MAX_CHECK_CONNECTIONS);
    expect(MAX_CHECK_CONNECTIONS).toBe(64);
  });
});

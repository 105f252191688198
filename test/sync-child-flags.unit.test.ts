import { describe, expect, it } from 'vitest';
import { missingSyncFlags, SYNC_V8_FLAGS, syncExecArgv } from '../src/sync/v8-flags.js';

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
});

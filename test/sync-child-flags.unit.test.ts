import { describe, expect, it } from 'vitest';
import { SYNC_V8_FLAGS, syncExecArgv } from '../src/sync/child-process.js';

describe('the sync process flags', () => {
  it("adds the sync's V8 flags to the parent's, without its debugger port", () => {
    expect(syncExecArgv(['--enable-source-maps', '--inspect=9229'])).toEqual(['--enable-source-maps', ...SYNC_V8_FLAGS]);
  });

  it("keeps an operator's own young-generation size, in either spelling", () => {
    expect(syncExecArgv(['--max-semi-space-size=8'])).toEqual(['--max-semi-space-size=8']);
    expect(syncExecArgv(['--max_semi_space_size=8'])).toEqual(['--max_semi_space_size=8']);
  });
});

import { describe, expect, it } from 'vitest';
import { clipEchoed, ECHO_ID_CHARS, echoId } from '../src/runtime/line-text.js';

describe('echoId', () => {
  it('quotes a short id whole, control characters escaped', () => {
    expect(echoId('customer/42')).toBe('"customer/42"');
    expect(echoId('a\nb')).toBe('"a\\nb"');
    expect(echoId('z'.repeat(ECHO_ID_CHARS))).toBe(JSON.stringify('z'.repeat(ECHO_ID_CHARS)));
  });

  it('cuts a long id to its first 64 characters and gives its size in bytes', () => {
    expect(echoId('a'.repeat(10_240))).toBe(`"${'a'.repeat(64)}"… (10240 bytes)`);
    expect(clipEchoed('7'.repeat(1_000))).toBe(`${'7'.repeat(64)}… (1000 bytes)`);
  });

  it('counts characters, never cutting a surrogate pair, and bytes as UTF-8', () => {
    const id = '😀'.repeat(100);
    expect(echoId(id)).toBe(`"${'😀'.repeat(64)}"… (400 bytes)`);
    expect(echoId('😀'.repeat(64))).toBe(JSON.stringify('😀'.repeat(64)));
  });
});

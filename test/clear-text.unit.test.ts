/**
 * The clear-text rule (src/runtime/clear-text.ts): plain http: only to
 * loopback, a replica without TLS only on loopback. Pure: nothing resolves
 * or connects.
 */
import { describe, expect, it } from 'vitest';
import { clearTextListenProblem, clearTextUrlProblem, isLoopbackHost } from '../src/runtime/clear-text.js';

describe('isLoopbackHost', () => {
  it.each([
    '127.0.0.1',
    '127.1.2.3',
    '127.255.255.254',
    'localhost',
    'LOCALHOST',
    'localhost.',
    '::1',
    '[::1]',
    '0:0:0:0:0:0:0:1',
    '[::ffff:7f00:1]',
  ])('%s is loopback', (host) => expect(isLoopbackHost(host)).toBe(true));

  it.each([
    '0.0.0.0',
    '::',
    '[::]',
    '10.0.0.5',
    '128.0.0.1',
    '192.168.1.10',
    '[::ffff:a00:5]',
    'leader.internal',
    'localhost.example.com',
    'my-localhost',
    '',
  ])('%s is beyond loopback', (host) => expect(isLoopbackHost(host)).toBe(false));
});

describe('clearTextUrlProblem', () => {
  it.each([
    'http://127.0.0.1:8788',
    'http://localhost:8787/base',
    'http://[::1]:9/',
    // WHATWG URL reads a bare number as an IPv4 address: 2130706433 is 127.0.0.1.
    'http://2130706433/',
    'https://leader.internal:8788',
    'https://10.0.0.5/in',
  ])('accepts %s', (url) => expect(clearTextUrlProblem(url)).toBeUndefined());

  it.each([
    ['http://10.1.2.3/in', '10.1.2.3'],
    ['http://hooks.internal/in', 'hooks.internal'],
    ['http://leader.internal:8788', 'leader.internal'],
    ['http://[fd00::5]:8788', '[fd00::5]'],
    ['http://0.0.0.0:8788', '0.0.0.0'],
  ])('refuses %s, naming the host and the way out', (url, host) => {
    expect(clearTextUrlProblem(url)).toBe(
      `plain http: to ${host}, beyond this host, would carry health data and keys in clear; use https:, or TLS_BY_PROXY=1 when a TLS proxy carries it`,
    );
  });

  it('leaves a URL that does not parse to its schema', () => expect(clearTextUrlProblem('not a url')).toBeUndefined());
});

describe('clearTextListenProblem', () => {
  it('accepts loopback without TLS, and any address with it', () => {
    expect(clearTextListenProblem('127.0.0.1', false)).toBeUndefined();
    expect(clearTextListenProblem('::1', false)).toBeUndefined();
    expect(clearTextListenProblem('0.0.0.0', true)).toBeUndefined();
  });

  it('refuses every other address without TLS, naming the settings that fix it', () => {
    for (const host of ['0.0.0.0', '::', '10.0.0.5', 'leader.internal']) {
      const problem = clearTextListenProblem(host, false);
      expect(problem).toContain(`${host} is beyond loopback`);
      expect(problem).toContain('REPLICA_TLS_CERT_FILE and REPLICA_TLS_KEY_FILE');
      expect(problem).toContain('TLS_BY_PROXY=1');
    }
  });
});

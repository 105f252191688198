/**
 * The cause a command names when Redis cannot be used (jobs/redis-connection.ts, redisFailureOf):
 * the words ioredis and Redis use, sorted into unreachable, refused and timed out.
 */
import { describe, expect, it } from 'vitest';
import { RedisUnavailableError, redisFailureOf } from '../jobs/redis-connection.js';

describe('redisFailureOf', () => {
  it.each([
    ['NOAUTH HELLO must be called with the client already authenticated', 'refused'],
    ['WRONGPASS invalid username-password pair or user is disabled.', 'refused'],
    ["NOPERM this user has no permissions to run the 'info' command", 'refused'],
    ['connect ECONNREFUSED 127.0.0.1:6390', 'unreachable'],
    ['getaddrinfo ENOTFOUND redis.internal', 'unreachable'],
    ['Connection is closed.', 'unreachable'],
    ['Command timed out', 'timed out'],
    ['connect ETIMEDOUT', 'timed out'],
  ] as const)('%s: %s', (message, failure) => {
    expect(redisFailureOf(message)).toBe(failure);
  });

  it('takes no error at all for a connection that was accepted and never answered', () => {
    expect(redisFailureOf(undefined)).toBe('timed out');
  });
});

describe('RedisUnavailableError', () => {
  it('starts with the cause, and keeps the words producers have matched on for an outage', () => {
    expect(new RedisUnavailableError('x', false, 'refused').message).toBe('Redis refused the connection: x');
    expect(new RedisUnavailableError('x', false, 'timed out').message).toBe('Redis timed out: x');
    expect(new RedisUnavailableError('x').message).toBe('Redis is unreachable: x');
  });
});

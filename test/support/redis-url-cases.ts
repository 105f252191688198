/**
 * Redis URLs and whether each carries a password, for the one rule both the
 * CLI (src/runtime/url-secrets.ts) and ecosystem.config.cjs apply: ioredis
 * reads a password from the user info and takes every query parameter as an
 * option, so `?password=` works as well as `:pw@`.
 */
export const REDIS_URL_PASSWORD = 'hunter2-in-a-url';

export const REDIS_URL_CASES: ReadonlyArray<{ url: string; password: boolean }> = [
  { url: 'redis://10.0.0.5:6379/2', password: false },
  { url: 'redis://app@10.0.0.5:6379', password: false },
  { url: 'redis://10.0.0.5:6379/0?family=6', password: false },
  { url: `redis://:${REDIS_URL_PASSWORD}@10.0.0.5:6379`, password: true },
  { url: `rediss://default:${REDIS_URL_PASSWORD}@10.0.0.5:6380/1`, password: true },
  { url: `redis://10.0.0.5/?password=${REDIS_URL_PASSWORD}`, password: true },
  { url: `redis://10.0.0.5:6379/0?db=1&PassWord=${REDIS_URL_PASSWORD}`, password: true },
  { url: `redis://10.0.0.5/?pass%77ord=${REDIS_URL_PASSWORD}`, password: true },
  { url: `rediss://10.0.0.5/?sentinelPassword=${REDIS_URL_PASSWORD}`, password: true },
];

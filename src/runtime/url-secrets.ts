/**
 * The one rule for secrets in URLs: a Redis URL that carries a password is a
 * secret, given by file (`REDIS_URL_FILE`), never by value. ioredis reads a
 * password from the user info (`redis://:pw@host`) and takes every query
 * parameter as a connection option (`?password=`, `?sentinelPassword=`), so
 * both count; a query parameter counts whatever its case or encoding.
 * ecosystem.config.cjs applies the same rule to the environment of
 * `pm2 start` (it cannot import this file; test/pm2.test.ts holds the two to
 * the same cases, test/support/redis-url-cases.ts).
 */

/** Where `text` (a Redis URL) carries a password, or undefined when it carries none or is no URL. */
export function redisUrlPasswordAt(text: string): 'user info' | 'query' | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.password !== '') return 'user info';
  for (const key of url.searchParams.keys()) if (/pass/i.test(key)) return 'query';
  return undefined;
}

/** The problem to report for such a URL given by value in `name` (its `_FILE` named). */
export function urlPasswordProblem(name: string, at: 'user info' | 'query'): string {
  return (
    `${name}: carries a password (in its ${at}), given by value: the environment shows it (ps e, /proc, pm2's dump.pm2). ` +
    `Put the URL in a file only this account can read (chmod 600) and set ${name}_FILE instead`
  );
}

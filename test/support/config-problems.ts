import { ConfigError } from '../../src/runtime/config.js';

/** The problems of the ConfigError `fn` throws (anything else is rethrown; no throw fails). */
export function problemsOf(fn: () => unknown): readonly string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

/**
 * Churn while a client pages through the directory: after each served list
 * page, some users are appended and some random live users deleted.
 * Deleting before the client's cursor shifts later users back by one, so an
 * offset-paging client skips records unless it notices: the drift a mirror
 * must detect.
 */
import type { Directory } from './directory.js';
import { Prng, seedKey } from './prng.js';

export class Churn {
  private readonly prng: Prng;

  constructor(seed: number) {
    this.prng = new Prng(seedKey(seed), 41);
  }

  apply(directory: Directory, add: number, remove: number): void {
    if (add > 0) directory.add(add);
    for (let k = 0; k < remove && directory.size > 0; k++) {
      const index = directory.indexAt(this.prng.int(0, directory.size - 1));
      if (index !== undefined) directory.delete([index]);
    }
  }
}

/**
 * Churn while a client pages through the directory: after each served list
 * page, some users are appended, some random live users deleted and some
 * random live users updated. Deleting before the client's cursor shifts
 * later users back by one, so an offset-paging client skips records unless
 * it notices: the drift a mirror must detect. Updates are what a mirror
 * must pick up on the next scan without mistaking them for new users.
 *
 * Which users are hit is drawn from the seed, so the same requests against
 * the same seed churn the same users.
 */
import type { Directory } from './directory.js';
import { CHANGES } from './revision.js';
import { Prng, seedKey } from './random.js';

export interface ChurnPerPage {
  add: number;
  delete: number;
  update: number;
}

export class Churn {
  private readonly prng: Prng;
  /** A stream of its own, so a plan with updates deletes exactly the users the same plan without them would. */
  private readonly updates: Prng;

  constructor(seed: number) {
    this.prng = new Prng(seedKey(seed), 41);
    this.updates = new Prng(seedKey(seed), 43);
  }

  apply(directory: Directory, perPage: ChurnPerPage): void {
    if (perPage.add > 0) directory.add(perPage.add);
    for (let k = 0; k < perPage.delete && directory.size > 0; k++) {
      const index = randomLiveIndex(directory, this.prng);
      if (index !== undefined) directory.delete([index]);
    }
    for (let k = 0; k < perPage.update && directory.size > 0; k++) {
      const index = randomLiveIndex(directory, this.updates);
      if (index !== undefined) directory.update(index, this.updates.pick(CHANGES));
    }
  }
}

function randomLiveIndex(directory: Directory, prng: Prng): number | undefined {
  return directory.indexAt(prng.int(0, directory.size - 1));
}

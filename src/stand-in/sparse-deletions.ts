/**
 * The deleted indexes of a directory whose records live at indexes
 * 0..universe-1. Deletions are few next to the universe, so they are kept as
 * a sorted array and live positions are found by binary search instead of
 * by materializing the list of live indexes.
 */
export class SparseDeletions {
  private readonly members = new Set<number>();
  private readonly sorted: number[] = [];

  get size(): number {
    return this.members.size;
  }

  has(index: number): boolean {
    return this.members.has(index);
  }

  add(index: number): boolean {
    if (this.members.has(index)) return false;
    this.members.add(index);
    this.sorted.splice(lowerBound(this.sorted, index), 0, index);
    return true;
  }

  remove(index: number): boolean {
    if (!this.members.delete(index)) return false;
    this.sorted.splice(lowerBound(this.sorted, index), 1);
    return true;
  }

  /**
   * The index of the live record at `position` (0-based). With d[j] the
   * sorted deletions, d[j] - j live records precede d[j], which is
   * non-decreasing in j: so the deletions before the answer are the j with
   * d[j] - j <= position.
   */
  indexAt(position: number): number {
    const d = this.sorted;
    let lo = 0;
    let hi = d.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((d[mid] ?? 0) - mid <= position) lo = mid + 1;
      else hi = mid;
    }
    return position + lo;
  }

  /** Live indexes from `position` on, below `universe`, in order. */
  *liveFrom(position: number, universe: number): Generator<number> {
    const d = this.sorted;
    let index = this.indexAt(position);
    let next = lowerBound(d, index);
    for (; index < universe; index++) {
      if (d[next] === index) {
        next++;
        continue;
      }
      yield index;
    }
  }
}

function lowerBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((sorted[mid] ?? 0) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

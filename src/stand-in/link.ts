/**
 * A link of limited bandwidth (`--bandwidth-mbps`) that every answer in
 * flight shares, as they would share a real one: each chunk written waits
 * for its turn on the link and for the time its bytes take to cross it. With
 * the stand-in's latency, a stand-in for a service across the internet,
 * where the bytes of a page, not the CPU, decide a re-sync's time.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Bytes per write: small enough that answers in flight take turns, large enough to cost little. */
export const LINK_CHUNK_BYTES = 16 * 1024;

export class Link {
  /** When the link is free again (performance.now() milliseconds). */
  private freeAt = 0;

  /** Waits until `bytes` have crossed a link of `mbps`, after what is already on it. */
  async cross(bytes: number, mbps: number, signal: AbortSignal): Promise<void> {
    const now = performance.now();
    this.freeAt = Math.max(now, this.freeAt) + (bytes * 8) / (mbps * 1_000);
    const wait = this.freeAt - now;
    if (wait >= 1) await sleep(wait, undefined, { signal });
  }
}

/**
 * What a pass of the PostgreSQL sink does next, from the destination's
 * position, the mirror feed's position and the page after the destination's
 * cursor. Pure; ./replicate.ts acts on it.
 */
import type { FeedPage } from '../../../db/change-feed.js';
import type { FeedPosition } from '../../../db/sink-snapshot.js';
import type { DestinationPosition, FeedEventBody } from './destination.js';

export type Step =
  | { kind: 'done' }
  | { kind: 'baseline'; why: string }
  | { kind: 'batch'; after: { cursor: number; epoch: string }; events: FeedEventBody[]; to: number };

/** Events that restart the feed under a destination: what it holds can no longer be continued event by event. */
const RESTARTS: Readonly<Record<string, string>> = {
  'mirror.baseline': 'the mirror had its first sync after the destination was loaded',
  'mirror.restored': 'the mirror was restored from a backup',
};

export function nextStep(
  position: DestinationPosition | undefined,
  feed: FeedPosition,
  policyId: string,
  page: FeedPage | undefined,
): Step {
  if (position === undefined) return { kind: 'baseline', why: 'no baseline yet' };
  if (position.epoch !== feed.epoch)
    return { kind: 'baseline', why: `the feed's epoch changed (${position.epoch} → ${feed.epoch}): the mirror was restored or rebuilt` };
  if (position.fieldPolicy !== policyId)
    return { kind: 'baseline', why: `the field policy changed (${position.fieldPolicy} → ${policyId})` };
  if (position.cursor > feed.cursor)
    return { kind: 'baseline', why: `the destination is ahead of the feed (${position.cursor} > ${feed.cursor})` };
  if (page === undefined || page.gone)
    return { kind: 'baseline', why: `the feed no longer holds the events after ${position.cursor} (retention or a restore)` };
  const restart = page.events.findIndex((e) => RESTARTS[e.type] !== undefined);
  const events = restart === -1 ? page.events : page.events.slice(0, restart);
  if (events.length === 0) {
    const first = page.events[0];
    return first === undefined ? { kind: 'done' } : { kind: 'baseline', why: RESTARTS[first.type] ?? first.type };
  }
  return {
    kind: 'batch',
    after: { cursor: position.cursor, epoch: position.epoch },
    events: events.map((e) => ({ cursor: e.cursor, body: e.body })),
    to: events.at(-1)?.cursor ?? position.cursor,
  };
}

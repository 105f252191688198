/**
 * Schema drift's pure parts: the parser names the rule a field broke
 * (src/service/warning-rules.ts), and a run's tally (src/sync/drift-tally.ts)
 * counts records per top-level field and rule with bounded labels.
 */
import { describe, expect, it } from 'vitest';
import { parseUser } from '../src/service/user-record.js';
import { ruleOfIssueCode } from '../src/service/warning-rules.js';
import { DriftTally, MAX_NEW_FIELDS, OTHER_FIELD, topLevelField } from '../src/sync/drift-tally.js';
import { wireUser, type WireRecord } from './support/mirror-fixtures.js';

function warningsOf(record: WireRecord) {
  const r = parseUser(record);
  if (!r.ok) throw new Error(r.issues);
  return r.warnings;
}

describe('field warnings name the rule broken', () => {
  it('a date that is not a date, a number where a string goes, an unreadable list', () => {
    const w = warningsOf(wireUser(1, { ingestion_start: 'soon', created_on: 5, connected_sources: 'none' }));
    expect(w.map(({ field, rule }) => ({ field, rule }))).toEqual(
      expect.arrayContaining([
        { field: 'ingestion_start', rule: 'bad_format' },
        { field: 'created_on', rule: 'wrong_type' },
        { field: 'connected_sources', rule: 'wrong_type' },
      ]),
    );
    expect(w).toHaveLength(3);
  });

  it('maps every zod issue code into the closed set, unknown codes to broken_rule', () => {
    expect(ruleOfIssueCode('too_small')).toBe('out_of_range');
    expect(ruleOfIssueCode('invalid_value')).toBe('not_allowed');
    expect(ruleOfIssueCode('custom')).toBe('broken_rule');
    expect(ruleOfIssueCode(undefined)).toBe('broken_rule');
  });
});

describe('a run tally', () => {
  it('counts a record once per top-level field and rule, and unknown top-level keys as new_field', () => {
    const tally = new DriftTally();
    const bad = wireUser(1, {
      connected_sources: [
        { created_on: 'x', provider: { slug: 'oura', name: 'Oura' } },
        { created_on: 'y', provider: { slug: 'a', name: 'A' } },
      ],
      sleep_score: 3,
    });
    tally.addRecord(bad, warningsOf(bad));
    const good = wireUser(2, { sleep_score: 4 });
    tally.addRecord(good, warningsOf(good));
    expect(tally.counted()).toEqual([
      { field: 'connected_sources', rule: 'bad_format', records: 1 },
      { field: 'sleep_score', rule: 'new_field', records: 2 },
    ]);
  });

  it('keeps the first MAX_NEW_FIELDS new names and folds the rest, and any name not shaped like a field, into other', () => {
    const tally = new DriftTally();
    const extra: WireRecord = {};
    for (let i = 0; i < MAX_NEW_FIELDS + 5; i++) extra[`f${i}`] = i;
    extra['not a field!'] = 1;
    tally.addRecord(wireUser(1, extra), []);
    const counted = tally.counted();
    expect(counted.filter((c) => c.field !== OTHER_FIELD)).toHaveLength(MAX_NEW_FIELDS);
    expect(counted.find((c) => c.field === OTHER_FIELD)).toEqual({ field: OTHER_FIELD, rule: 'new_field', records: 6 });
  });

  it('labels a warning by its top-level field', () => {
    expect(topLevelField('connected_sources[2].provider.slug')).toBe('connected_sources');
    expect(topLevelField('fallback_time_zone.id')).toBe('fallback_time_zone');
    expect(topLevelField('created_on')).toBe('created_on');
  });
});

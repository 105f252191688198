/**
 * Schema drift, counted per run: how many written records carried each
 * (field, rule) warning, and which top-level keys the schema does not know
 * (`new_field`). Only records the run parses are seen (new and changed
 * ones: an unchanged record's bytes are never parsed), so a run counts what
 * arrived, not what the mirror holds (`status`'s field warnings say that).
 *
 * Labels stay bounded whatever the service sends: `field` is the top-level
 * name of the warning's path (`connected_sources`, not
 * `connected_sources[3].provider.slug`), a new key's name is kept only when
 * it looks like a field name and only for the first MAX_NEW_FIELDS distinct
 * ones of a run; the rest count under `other`. Pure.
 */
import { UserSchema } from '../service/schemas.js';
import type { RuleWarning } from '../service/user-record.js';
import type { WarningRule } from '../service/warning-rules.js';

/** Distinct new top-level names a run keeps as labels; more fold into `other`. */
export const MAX_NEW_FIELDS = 20;
/** The label of new names past the bound or not shaped like a field name. */
export const OTHER_FIELD = 'other';

const KNOWN_FIELDS: ReadonlySet<string> = new Set(Object.keys(UserSchema.shape));
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/** Records of a run that carried one (field, rule) warning. */
export interface DriftCount {
  field: string;
  rule: WarningRule;
  records: number;
}

/** The top-level name of a warning's path: `connected_sources[2].provider.slug` → `connected_sources`. */
export function topLevelField(path: string): string {
  const end = path.search(/[.[]/);
  return end === -1 ? path : path.slice(0, end);
}

export class DriftTally {
  private readonly counts = new Map<string, DriftCount>();
  private readonly newNames = new Set<string>();

  /** One parsed record: its warnings, and the top-level keys of its raw object the schema does not know. */
  addRecord(raw: unknown, warnings: readonly RuleWarning[]): void {
    // One count per (field, rule) per record: two bad sources are one record with a warning.
    let seen: Set<string> | undefined;
    for (const w of warnings) {
      const field = topLevelField(w.field);
      const key = `${field}\t${w.rule}`;
      if (seen?.has(key) === true) continue;
      (seen ??= new Set()).add(key);
      this.bump(field, w.rule);
    }
    if (typeof raw !== 'object' || raw === null) return;
    for (const name in raw) if (!KNOWN_FIELDS.has(name)) this.bump(this.newFieldLabel(name), 'new_field');
  }

  /** The run's counts, by field then rule. */
  counted(): DriftCount[] {
    return [...this.counts.values()].sort((a, b) => a.field.localeCompare(b.field) || a.rule.localeCompare(b.rule));
  }

  private newFieldLabel(name: string): string {
    if (this.newNames.has(name)) return name;
    if (!FIELD_NAME.test(name) || this.newNames.size >= MAX_NEW_FIELDS) return OTHER_FIELD;
    this.newNames.add(name);
    return name;
  }

  private bump(field: string, rule: WarningRule): void {
    const key = `${field}\t${rule}`;
    const count = this.counts.get(key);
    if (count === undefined) this.counts.set(key, { field, rule, records: 1 });
    else count.records++;
  }
}

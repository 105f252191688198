/**
 * The user record as the mirror takes it: the shape of a parsed user, the
 * fields dropped from it, and the record as handed to a write. db/ states
 * this shape itself so that it depends on nothing above; the service's
 * parsed User (src/service/schemas.ts, inferred from the wire schemas) must
 * be assignable to MirroredUser, and src/sync/page-decode.ts (which imports
 * both) fails `tsc` when the two drift apart. Types only: no code.
 */

/** A `provider` (current) or `source` (deprecated) descriptor of a connected source. */
export interface SourceDescriptor {
  slug: string;
  name: string;
  logo?: string | null | undefined;
}

/** One of a user's connected sources: it carries `provider`, `source` or both. */
export interface ConnectedSource {
  created_on?: string | null | undefined;
  provider?: SourceDescriptor | undefined;
  source?: SourceDescriptor | undefined;
}

/** The parts of a user record the rows are made of (db/user-row.ts), with field-level rules already applied. */
export interface MirroredUser {
  user_id: string;
  team_id: string;
  client_user_id: string;
  created_on?: string | null | undefined;
  connected_sources: readonly ConnectedSource[];
  fallback_time_zone?: { id: string; source_slug?: string | null | undefined; updated_at?: string | null | undefined } | null | undefined;
  fallback_birth_date?:
    { value: string; source_slug?: string | null | undefined; updated_at?: string | null | undefined } | null | undefined;
  ingestion_start?: string | null | undefined;
  ingestion_end?: string | null | undefined;
}

/** A field dropped from a record because it broke its rule, as `field_warnings` stores it. */
interface FieldWarning {
  /** Path in the record as received: `ingestion_start`, `connected_sources[2].provider.slug`. */
  field: string;
  /** The rule the value broke, and what was dropped when more than the field itself. */
  problem: string;
}

/**
 * A parsed record, ready to be written (db/user-writes.ts). `U`: the parsed
 * user's own type where the caller knows more of it (the service client's
 * User); the mirror needs only MirroredUser.
 */
export interface StagedRecord<U extends MirroredUser = MirroredUser> {
  /** The parsed record: fields that broke their rule are absent. */
  user: U;
  /** The record's text exactly as received (its bytes, from a sync), unknown fields included. */
  rawJson: string;
  /** The fields dropped from `user`, stored in `field_warnings`. */
  warnings: readonly FieldWarning[];
}

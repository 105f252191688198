/**
 * The fixed names of the rules a record's field can break, as field
 * warnings and `user_mirror_field_warnings_total{rule}` carry them. The
 * human text of a warning (`problem`) says more and may change between
 * releases; a rule name is a label an alert is written against, so the set
 * is closed and small. Pure.
 */

/** What a field did wrong; `new_field` is a top-level key the schema does not know (kept, not dropped). */
export type WarningRule = 'wrong_type' | 'bad_format' | 'out_of_range' | 'not_allowed' | 'broken_rule' | 'new_field';

/** A zod issue code as a rule name: several codes say the same thing to an operator. */
export function ruleOfIssueCode(code: string | undefined): WarningRule {
  switch (code) {
    case 'invalid_type':
      return 'wrong_type';
    case 'invalid_format':
      return 'bad_format';
    case 'too_big':
    case 'too_small':
    case 'not_multiple_of':
      return 'out_of_range';
    case 'invalid_value':
    case 'invalid_union':
    case 'invalid_key':
    case 'invalid_element':
    case 'unrecognized_keys':
      return 'not_allowed';
    default:
      return 'broken_rule';
  }
}

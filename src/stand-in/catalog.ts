/**
 * Static vocabulary the generated users draw from. Real provider slugs and
 * IANA zones, so a mirror under test meets values shaped like production's.
 */
import type { Prng } from './random.js';

export interface ProviderEntry {
  readonly slug: string;
  readonly name: string;
}

export const PROVIDERS: readonly ProviderEntry[] = [
  { slug: 'oura', name: 'Oura' },
  { slug: 'fitbit', name: 'Fitbit' },
  { slug: 'garmin', name: 'Garmin' },
  { slug: 'whoop_v2', name: 'WHOOP' },
  { slug: 'withings', name: 'Withings' },
  { slug: 'apple_health_kit', name: 'Apple HealthKit' },
  { slug: 'polar', name: 'Polar' },
  { slug: 'dexcom_v3', name: 'Dexcom' },
  { slug: 'freestyle_libre', name: 'Freestyle Libre' },
  { slug: 'strava', name: 'Strava' },
  { slug: 'peloton', name: 'Peloton' },
  { slug: 'google_fit', name: 'Google Fit' },
  { slug: 'samsung_health', name: 'Samsung Health' },
  { slug: 'eight_sleep', name: 'Eight Sleep' },
  { slug: 'omron', name: 'Omron' },
  { slug: 'wahoo', name: 'Wahoo' },
  { slug: 'zwift', name: 'Zwift' },
  { slug: 'renpho', name: 'Renpho' },
  { slug: 'health_connect', name: 'Health Connect' },
  { slug: 'ultrahuman', name: 'Ultrahuman' },
];

export const TIME_ZONES: readonly string[] = [
  'Europe/London',
  'Europe/Berlin',
  'Europe/Paris',
  'Europe/Madrid',
  'Europe/Stockholm',
  'America/New_York',
  'America/Chicago',
  'America/Denver',
  'America/Los_Angeles',
  'America/Sao_Paulo',
  'America/Toronto',
  'Asia/Tokyo',
  'Asia/Singapore',
  'Asia/Kolkata',
  'Asia/Dubai',
  'Australia/Sydney',
  'Pacific/Auckland',
  'Africa/Johannesburg',
];

/** Current logo location; `source` (deprecated) sometimes still points at the old one. */
export function providerLogo(slug: string): string {
  return `https://assets.stand-in.invalid/providers/${slug}.png`;
}

export function legacySourceLogo(slug: string): string {
  return `https://storage.stand-in.invalid/logos/${slug}_logo.png`;
}

/**
 * Appended to 1 in ~500 client ids: characters a client must percent-encode
 * in a path segment, and a few a careless server would normalize.
 */
export const AWKWARD_ID_SUFFIXES: readonly string[] = [
  ' smith',
  '/team/a',
  '?ref=x#frag',
  '%41%zz',
  '..',
  '/../up',
  ' ünïcødé',
  '東京',
  '+plus&amp;',
  ' /?#%..',
];

/**
 * The two date-time spellings the live service mixes, plus plain dates.
 *
 * Formatted by hand rather than with `Date#toISOString`: that call costs
 * about a microsecond, and a list page needs thousands of dates.
 */
export const DAY_MS = 86_400_000;

const TWO_DIGITS = Array.from({ length: 100 }, (_, n) => String(n).padStart(2, '0'));
const THREE_DIGITS = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, '0'));

/** Day numbers whose text is memoized: 1900-01-01 to 2099-12-31, a few MB at most. */
const CACHE_FIRST_DAY = -25_567;
const CACHE_DAYS = 73_049;
const dateCache: Array<string | undefined> = [];

function civilDate(days: number): string {
  const slot = days - CACHE_FIRST_DAY;
  if (slot < 0 || slot >= CACHE_DAYS) return computeCivilDate(days);
  return (dateCache[slot] ??= computeCivilDate(days));
}

/** `YYYY-MM-DD` of a UTC day number (days since 1970-01-01), via Hinnant's civil_from_days. */
function computeCivilDate(days: number): string {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  return `${year}-${TWO_DIGITS[month]}-${TWO_DIGITS[day]}`;
}

/** `YYYY-MM-DDTHH:MM:SS` and the leftover milliseconds. */
function civilDateTime(ms: number): [string, number] {
  const days = Math.floor(ms / DAY_MS);
  const inDay = ms - days * DAY_MS;
  const secs = Math.floor(inDay / 1000);
  const hh = TWO_DIGITS[Math.floor(secs / 3600)];
  const mm = TWO_DIGITS[Math.floor(secs / 60) % 60];
  const ss = TWO_DIGITS[secs % 60];
  return [`${civilDate(days)}T${hh}:${mm}:${ss}`, inDay - secs * 1000];
}

/** `2022-08-04T12:42:45.596792+00:00`: Python's isoformat of an aware datetime. */
export function isoMicros(ms: number, micros: number): string {
  const [text, millis] = civilDateTime(Math.floor(ms));
  return `${text}.${THREE_DIGITS[millis]}${THREE_DIGITS[micros % 1000]}+00:00`;
}

/** `2026-01-12T12:39:40Z`. */
export function isoSeconds(ms: number): string {
  return `${civilDateTime(Math.floor(ms))[0]}Z`;
}

/** `2021-03-04T05:06:07`: no offset at all, as some older records carry. */
export function isoNaive(ms: number): string {
  return civilDateTime(Math.floor(ms))[0];
}

/** `YYYY-MM-DD`. */
export function isoDate(ms: number): string {
  return civilDate(Math.floor(ms / DAY_MS));
}

/** Either spelling, chosen by the stream, so both appear within one page. */
export function anyDateTime(prng: Prng, ms: number): string {
  return prng.chance(0.5) ? isoMicros(ms, prng.int(0, 999)) : isoSeconds(ms);
}

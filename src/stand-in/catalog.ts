/**
 * Static vocabulary the generated users draw from. Real provider slugs and
 * IANA zones, so a mirror under test meets values shaped like production's.
 */

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

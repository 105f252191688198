/**
 * A ServiceClient for processes that only remove org members and hold no
 * team key. The client requires a team base URL and key; the management URL
 * stands in for the base URL and the key is empty. That is safe because a
 * removal process only ever calls `deleteOrgMember`, which sends the
 * management key and never the team header.
 */
import { ServiceClient, type ServiceClientOptions } from '../src/service/client.js';
import type { Config } from '../src/config.js';

export type ManagementConfig = Config<
  'MANAGEMENT_URL' | 'MANAGEMENT_KEY' | 'HTTP_CONNECTIONS' | 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_BODY_TIMEOUT_MS'
>;

export const MANAGEMENT_CLIENT_ENV = [
  'MANAGEMENT_URL',
  'MANAGEMENT_KEY',
  'HTTP_CONNECTIONS',
  'HTTP_HEADERS_TIMEOUT_MS',
  'HTTP_BODY_TIMEOUT_MS',
] as const;

/**
 * `concurrency` removals in flight need as many sockets; fewer would queue
 * requests inside undici while their job locks tick.
 */
export function managementClientFromConfig(
  config: ManagementConfig,
  concurrency: number,
  extra: Pick<ServiceClientOptions, 'onResponse'> = {},
): ServiceClient {
  return new ServiceClient({
    baseUrl: config.MANAGEMENT_URL,
    apiKey: '',
    managementUrl: config.MANAGEMENT_URL,
    managementKey: config.MANAGEMENT_KEY,
    connections: Math.max(config.HTTP_CONNECTIONS, concurrency),
    headersTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.HTTP_BODY_TIMEOUT_MS,
    ...extra,
  });
}

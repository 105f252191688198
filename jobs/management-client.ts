/**
 * A ServiceClient for processes that only remove org members: the
 * management half alone, so no team key is needed and none can be sent.
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
    managementUrl: config.MANAGEMENT_URL,
    managementKey: config.MANAGEMENT_KEY,
    connections: Math.max(config.HTTP_CONNECTIONS, concurrency),
    headersTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.HTTP_BODY_TIMEOUT_MS,
    ...extra,
  });
}

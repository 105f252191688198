/** Builds a ServiceClient from validated configuration. */
import { ServiceClient, type ServiceClientOptions } from './client.js';
import type { Config } from '../config.js';

/** Any mix of the team half, the management half and the HTTP tuning variables. */
type ServiceConfig = Partial<
  Config<
    | 'SERVICE_BASE_URL'
    | 'SERVICE_API_KEY'
    | 'SERVICE_API_KEY_HEADER'
    | 'MANAGEMENT_URL'
    | 'MANAGEMENT_KEY'
    | 'HTTP_CONNECTIONS'
    | 'HTTP_HEADERS_TIMEOUT_MS'
    | 'HTTP_BODY_TIMEOUT_MS'
    | 'HTTP_REQUEST_TIMEOUT_MS'
    | 'SYNC_MAX_PAGE_BYTES'
  >
>;

export function serviceClientFromConfig(
  config: ServiceConfig,
  extra: Pick<ServiceClientOptions, 'onResponse'> = {},
): ServiceClient {
  return new ServiceClient({
    baseUrl: config.SERVICE_BASE_URL,
    apiKey: config.SERVICE_API_KEY,
    apiKeyHeader: config.SERVICE_API_KEY_HEADER,
    managementUrl: config.MANAGEMENT_URL,
    managementKey: config.MANAGEMENT_KEY,
    connections: config.HTTP_CONNECTIONS,
    headersTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.HTTP_BODY_TIMEOUT_MS,
    requestTimeoutMs: config.HTTP_REQUEST_TIMEOUT_MS,
    maxBodyBytes: config.SYNC_MAX_PAGE_BYTES,
    ...extra,
  });
}

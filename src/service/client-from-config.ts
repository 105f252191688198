/**
 * The one client factory: a ServiceClient from validated configuration.
 * A process that only removes org members passes the management half alone,
 * so no team key is needed and none can be sent.
 */
import { ServiceClient, type ServiceClientOptions } from './client.js';
import { HTTP_CLIENT_ENV, MANAGEMENT_ENV, type Config } from '../runtime/config.js';

/** Any mix of the team half, the management half and the HTTP tuning variables. */
type ServiceConfig = Partial<
  Config<
    | 'SERVICE_BASE_URL'
    | 'SERVICE_API_KEY'
    | 'SERVICE_API_KEY_HEADER'
    | 'SERVICE_CA_FILE'
    | 'MANAGEMENT_URL'
    | 'MANAGEMENT_KEY'
    | 'HTTP_CONNECTIONS'
    | 'HTTP_HEADERS_TIMEOUT_MS'
    | 'HTTP_BODY_TIMEOUT_MS'
    | 'HTTP_REQUEST_TIMEOUT_MS'
    | 'SYNC_MAX_PAGE_BYTES'
    | 'SYNC_MAX_RESOLVE_BYTES'
  >
>;

export function serviceClientFromConfig(config: ServiceConfig, extra: Pick<ServiceClientOptions, 'onResponse'> = {}): ServiceClient {
  return new ServiceClient({
    baseUrl: config.SERVICE_BASE_URL,
    apiKey: config.SERVICE_API_KEY,
    apiKeyHeader: config.SERVICE_API_KEY_HEADER,
    serviceCa: config.SERVICE_CA_FILE,
    managementUrl: config.MANAGEMENT_URL,
    managementKey: config.MANAGEMENT_KEY,
    connections: config.HTTP_CONNECTIONS,
    headersTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    bodyTimeoutMs: config.HTTP_BODY_TIMEOUT_MS,
    requestTimeoutMs: config.HTTP_REQUEST_TIMEOUT_MS,
    maxBodyBytes: config.SYNC_MAX_PAGE_BYTES,
    maxRecordBodyBytes: config.SYNC_MAX_RESOLVE_BYTES,
    ...extra,
  });
}

/** What a removal worker reads to talk to the management service. */
export const MANAGEMENT_CLIENT_ENV = [...MANAGEMENT_ENV, ...HTTP_CLIENT_ENV, 'TLS_BY_PROXY'] as const;

/**
 * The management half, with a socket per removal in flight: fewer would
 * queue requests inside undici while their job locks tick.
 */
export function managementClientFromConfig(
  config: Config<'MANAGEMENT_URL' | 'MANAGEMENT_KEY' | 'HTTP_CONNECTIONS'> & ServiceConfig,
  concurrency: number,
  extra: Pick<ServiceClientOptions, 'onResponse'> = {},
): ServiceClient {
  const { MANAGEMENT_URL, MANAGEMENT_KEY, HTTP_HEADERS_TIMEOUT_MS, HTTP_BODY_TIMEOUT_MS, HTTP_REQUEST_TIMEOUT_MS } = config;
  return serviceClientFromConfig(
    {
      MANAGEMENT_URL,
      MANAGEMENT_KEY,
      HTTP_HEADERS_TIMEOUT_MS,
      HTTP_BODY_TIMEOUT_MS,
      HTTP_REQUEST_TIMEOUT_MS,
      HTTP_CONNECTIONS: Math.max(config.HTTP_CONNECTIONS, concurrency),
    },
    extra,
  );
}

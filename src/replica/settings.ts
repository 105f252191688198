/**
 * The replica's settings, from the configuration registry
 * (src/runtime/config.ts); ./start.ts starts a replica with them. Reading
 * the settings is pure but for the TLS files, checked here as a pair so a
 * bad one is reported with the other problems: the caller reads the
 * environment, and a `serve` without a key passes the one it generated.
 */
import { ConfigError, type Config, type REPLICA_ENV } from '../runtime/config.js';
import { openFileLimit } from '../runtime/descriptor-limit.js';
import { clearTextListenProblem } from '../runtime/clear-text.js';
import { tlsPairProblem, type ReplicaTlsFiles } from './tls.js';

export type ReplicaConfig = Config<(typeof REPLICA_ENV)[number]>;

export interface ReplicaSettings {
  host: string;
  /** 0 picks a free port (tests). */
  port: number;
  apiKey: string;
  /** Lowercase header names the key is read from (any of them opens the data routes). */
  apiKeyHeaders: readonly string[];
  maxStalenessMs: number;
  /** Connections held at once (./connection-guard.ts). */
  maxConnections: number;
  /** Node's headersTimeout (and requestTimeout: the replica takes no request bodies). */
  headersTimeoutMs: number;
  /** Node's keepAliveTimeout. */
  idleTimeoutMs: number;
  /** The certificate and key it serves https: with (./tls.ts); undefined: plain http:. */
  tls?: ReplicaTlsFiles;
}

/**
 * Descriptors kept for what is not a client connection: the mirror's files, Redis, the service client's
 * pool, webhooks, logs, and the daemon's own (whose figures are a few dozen).
 */
const DESCRIPTOR_RESERVE = 128;
/** The default cap's ceiling, whatever the descriptor limit: each connection costs memory too. */
const DEFAULT_MAX_CONNECTIONS = 4_096;

/** The cap: REPLICA_MAX_CONNECTIONS, checked against the descriptor limit, or derived from it. */
function maxConnections(given: number | undefined, descriptorLimit: number | undefined): number {
  const room = descriptorLimit === undefined ? undefined : descriptorLimit - DESCRIPTOR_RESERVE;
  if (given === undefined) return Math.max(1, Math.min(DEFAULT_MAX_CONNECTIONS, room ?? DEFAULT_MAX_CONNECTIONS));
  if (room !== undefined && given > room) {
    throw new ConfigError([
      `REPLICA_MAX_CONNECTIONS: ${given} is more than this process can hold: its descriptor limit is ${descriptorLimit} ` +
        `(ulimit -n, LimitNOFILE=), ${DESCRIPTOR_RESERVE} of them kept for files, Redis and logs; raise the limit or lower the cap to ${Math.max(1, room)}`,
    ]);
  }
  return given;
}

export const SERVE_DEFAULT_PORT = 8788;

/**
 * The header the official SDK (`@tryvital/vital-node`) sends its key in, whatever the service's
 * header is configured as. Accepted by default so that an SDK pointed at the replica works with
 * nothing but its base URL and key changed.
 */
const OFFICIAL_SDK_KEY_HEADER = 'x-vital-api-key';

/**
 * REPLICA_API_KEY_HEADER when set (then only that header); otherwise SERVICE_API_KEY_HEADER and
 * the official SDK's header, so a client of the service (plain HTTP or the SDK) changes only
 * its base URL and key.
 */
function replicaKeyHeaders(config: Pick<ReplicaConfig, 'REPLICA_API_KEY_HEADER' | 'SERVICE_API_KEY_HEADER'>): readonly string[] {
  if (config.REPLICA_API_KEY_HEADER !== undefined) return [config.REPLICA_API_KEY_HEADER.toLowerCase()];
  return [...new Set([config.SERVICE_API_KEY_HEADER.toLowerCase(), OFFICIAL_SDK_KEY_HEADER])];
}

export interface SettingsSources {
  /** The service's team key, when this process knows it: the replica must never accept it. */
  serviceApiKey: string | undefined;
  /** Used when REPLICA_PORT is unset. */
  defaultPort: number;
  /** Used when REPLICA_API_KEY is unset (`serve`); without it the key is required. */
  generatedKey?: string;
  /** This process's descriptor limit (../runtime/descriptor-limit.ts); undefined when unknown. */
  descriptorLimit?: number | undefined;
}

export function replicaSettings(config: ReplicaConfig, sources: SettingsSources): ReplicaSettings {
  const apiKey = config.REPLICA_API_KEY ?? sources.generatedKey;
  if (apiKey === undefined) throw new ConfigError(['REPLICA_API_KEY: is required when REPLICA_PORT is set']);
  // A replica that took the team key would hand it a second, unaudited door; equal keys are a mistake.
  if (apiKey === sources.serviceApiKey) {
    throw new ConfigError(['REPLICA_API_KEY: must differ from SERVICE_API_KEY (the replica never accepts the service key)']);
  }
  const tls = replicaTls(config);
  return {
    host: config.REPLICA_HOST,
    ...(tls === undefined ? {} : { tls }),
    port: config.REPLICA_PORT ?? sources.defaultPort,
    apiKey,
    apiKeyHeaders: replicaKeyHeaders(config),
    maxStalenessMs: config.REPLICA_MAX_STALENESS_S * 1000,
    maxConnections: maxConnections(config.REPLICA_MAX_CONNECTIONS, sources.descriptorLimit),
    headersTimeoutMs: config.REPLICA_HEADERS_TIMEOUT_MS,
    idleTimeoutMs: config.REPLICA_IDLE_TIMEOUT_MS,
  };
}

/**
 * The replica's TLS files: both or neither, a pair that works, and none only
 * where clear text stays on this host (REPLICA_HOST on loopback) or a TLS
 * proxy stands in front (TLS_BY_PROXY).
 */
function replicaTls(
  config: Pick<ReplicaConfig, 'REPLICA_HOST' | 'REPLICA_TLS_CERT_FILE' | 'REPLICA_TLS_KEY_FILE' | 'TLS_BY_PROXY'>,
): ReplicaTlsFiles | undefined {
  const { REPLICA_TLS_CERT_FILE: certFile, REPLICA_TLS_KEY_FILE: keyFile } = config;
  if (certFile !== undefined && keyFile !== undefined) {
    const problem = tlsPairProblem({ certFile, keyFile });
    if (problem !== undefined) throw new ConfigError([problem]);
    return { certFile, keyFile };
  }
  if (certFile !== undefined || keyFile !== undefined) {
    const [given, missing] =
      certFile === undefined ? ['REPLICA_TLS_KEY_FILE', 'REPLICA_TLS_CERT_FILE'] : ['REPLICA_TLS_CERT_FILE', 'REPLICA_TLS_KEY_FILE'];
    throw new ConfigError([`${missing}: is required when ${given} is set (the replica's certificate and its key come as a pair)`]);
  }
  const clear = config.TLS_BY_PROXY ? undefined : clearTextListenProblem(config.REPLICA_HOST, false);
  if (clear !== undefined) throw new ConfigError([`REPLICA_HOST: ${clear}`]);
  return undefined;
}

/**
 * The daemon's replica settings: undefined when REPLICA_PORT is unset; a ConfigError when they are wrong.
 * SERVICE_API_KEY may be absent (itself a configuration problem, reported beside this one).
 */
export function daemonReplicaSettings(config: ReplicaConfig & { SERVICE_API_KEY?: string | undefined }): ReplicaSettings | undefined {
  if (config.REPLICA_PORT === undefined) return undefined;
  return replicaSettings(config, {
    serviceApiKey: config.SERVICE_API_KEY,
    defaultPort: SERVE_DEFAULT_PORT,
    descriptorLimit: openFileLimit(),
  });
}

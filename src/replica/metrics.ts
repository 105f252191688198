/**
 * The replica's own metrics, served on its port at /metrics (no key: counts
 * only, no data) and, inside the daemon, also in the daemon's registry (its
 * status endpoint's /metrics). With REPLICA_WORKERS above 1 each process
 * answers for itself.
 */
import { Counter, Gauge, Registry } from 'prom-client';
import { collectProcessMetrics } from '../runtime/process-metrics.js';
import type { Shed } from './connection-guard.js';

export interface ReplicaMetrics {
  registry: Registry;
  shed(how: Shed): void;
  /** A connection the HTTP parser gave up on: headers not in time, malformed, or reset; or whose TLS handshake failed. */
  clientError(reason: 'headers_timeout' | 'malformed' | 'reset' | 'tls'): void;
}

export interface ReplicaMetricsOptions {
  max: number;
  open: () => number;
  /** When the certificate served to new connections ends (Unix ms); undefined without TLS (./tls.ts). */
  certificateValidTo?: () => number;
  /** Another registry to register in as well (the daemon's); without one, the process metrics are added here. */
  alsoIn?: Registry;
}

export function createReplicaMetrics(options: ReplicaMetricsOptions): ReplicaMetrics {
  const registry = new Registry();
  if (options.alsoIn === undefined) collectProcessMetrics(registry);
  const registers = options.alsoIn === undefined ? [registry] : [registry, options.alsoIn];
  new Gauge({
    name: 'user_mirror_replica_connections',
    help: 'Connections open to the replica now.',
    registers,
    collect() {
      this.set(options.open());
    },
  });
  const max = new Gauge({
    name: 'user_mirror_replica_connections_max',
    help: 'The connection cap (REPLICA_MAX_CONNECTIONS, or derived from the descriptor limit).',
    registers,
  });
  max.set(options.max);
  const shed = new Counter({
    name: 'user_mirror_replica_connections_shed_total',
    help: 'Connections closed at the cap: evicted (waited longest with no request in flight) or refused (none to evict).',
    labelNames: ['how'] as const,
    registers,
  });
  const clientErrors = new Counter({
    name: 'user_mirror_replica_client_errors_total',
    help: 'Connections the HTTP parser gave up on: headers_timeout (REPLICA_HEADERS_TIMEOUT_MS), malformed, reset; tls: the handshake failed.',
    labelNames: ['reason'] as const,
    registers,
  });
  for (const how of ['refused', 'evicted'] as const) shed.inc({ how }, 0);
  for (const reason of [
    'headers_timeout',
    'malformed',
    'reset',
    ...(options.certificateValidTo === undefined ? [] : ['tls' as const]),
  ] as const)
    clientErrors.inc({ reason }, 0);
  const validTo = options.certificateValidTo;
  if (validTo !== undefined) {
    // A renewal that was refused (./tls.ts) shows here as an end that does not move: alert on it coming near.
    new Gauge({
      name: 'user_mirror_replica_tls_valid_to_seconds',
      help: 'When the TLS certificate the replica serves to new connections expires (Unix seconds; REPLICA_TLS_CERT_FILE).',
      registers,
      collect() {
        this.set(validTo() / 1000);
      },
    });
  }
  return {
    registry,
    shed: (how) => shed.inc({ how }),
    clientError: (reason) => clientErrors.inc({ reason }),
  };
}

/**
 * The process logger: pino, one JSON event per line on stdout. Keys are
 * redacted by path as a second line of defence; the first is never putting
 * them into a log object at all.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

const REDACT = [
  'apiKey',
  'managementKey',
  '*.apiKey',
  '*.managementKey',
  'headers["x-management-key"]',
  'headers["x-service-api-key"]',
  'headers.authorization',
  '*.headers["x-management-key"]',
  '*.headers["x-service-api-key"]',
  'SERVICE_API_KEY',
  'MANAGEMENT_KEY',
  'REPLICA_API_KEY',
];

export function createLogger(level: LevelWithSilent = 'info', destination?: NodeJS.WritableStream): Logger {
  const options = { level, base: { pid: process.pid }, redact: { paths: REDACT, censor: '[redacted]' } };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}

/** For library use and tests: a logger that writes nothing. */
export const silentLogger: Logger = pino({ level: 'silent' });

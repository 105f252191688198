/**
 * The lifecycle of this project's servers and long-running commands.
 *
 * Binding and closing its HTTP servers. A bind error (port in
 * use, bad host) rejects the start instead of surfacing as an 'error' event
 * later; closing also cuts keep-alive connections, so a client's idle socket
 * never holds a shutdown open.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Resolves with the port actually bound (`port` 0 picks a free one). */
export function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

export function closeNow(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/** Resolves with the first SIGINT or SIGTERM, for commands that run until stopped. */
export function untilStopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(signal);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

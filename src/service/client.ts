/**
 * The service client: the only code that talks to `{base_url}` and
 * `{management_url}`.
 *
 * - One undici Pool per origin, connections capped, with header and body
 *   timeouts, a deadline for the whole request, and a size bound on every
 *   body fitted to what it carries (a page, one record, an error's detail),
 *   enforced on the decoded bytes while they are read.
 * - Every response body is read to its end or destroyed, on every path: a
 *   body left alone holds its connection, and the pool's close waits for it
 *   for ever (a process that closes its client then never exits).
 * - The team key goes only to base_url requests, the management key only to
 *   management_url requests; `X-Service-Org-Key` is never sent.
 * - Arguments are validated before anything leaves the process.
 * - Every response is parsed with the zod schemas in ./schemas.ts; failures
 *   become the typed errors of ./errors.ts, never crashes.
 */
import { Pool, type Dispatcher } from 'undici';
import type { IncomingHttpHeaders } from 'node:http';
import {
  HttpError,
  RequestValidationError,
  ResponseTooLargeError,
  ResponseValidationError,
  type ErrorBodyKind,
  type HttpMethod,
} from './errors.js';
import { settleWithin, startDeadline } from '../runtime/deadline.js';
import { transportError } from './transport-error.js';
import { pageQuery, requireId } from './request-params.js';
import { sourceFreshnessOf, type SourceFreshness } from './source-freshness.js';
import { CHANGES_PATH } from './change-feed-route.js';
import { encodePathSegment } from './path-segment.js';
import { parseRetryAfter } from './retry.js';
import { parseUser, type ReceivedUser } from './user-record.js';
import { formatIssues } from '../runtime/zod-issues.js';
import { scanRecordSpans, type RecordSpan } from './page-spans.js';
import { ErrorBodySchema, UserPageEnvelopeSchema } from './schemas.js';
import { ACCEPT_ENCODING } from './content-encoding.js';
import { BodyCodingError, DETAIL_BOUND, fittedBound, pageBound, readAnswerBody, recordBound, type BodyBound } from './body-bounds.js';

const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/** How long close() waits for requests in flight before dropping their connections. */
const CLOSE_WITHIN_MS = 5_000;

/**
 * Either half may be left out: a removal worker has no team key, an offline
 * tool has no management key. Calling a method whose half is missing throws
 * RequestValidationError before anything is sent.
 */
export interface ServiceClientOptions {
  baseUrl?: string;
  apiKey?: string;
  /** Header that carries the team key; the live service uses another name than the spec. */
  apiKeyHeader?: string;
  managementUrl?: string;
  managementKey?: string;
  /** PEM of the CA(s) that sign baseUrl's certificate when it is private (SERVICE_CA_FILE); unset: the system's CAs. */
  serviceCa?: string;
  /** Connections per origin. */
  connections?: number;
  headersTimeoutMs?: number;
  bodyTimeoutMs?: number;
  /** Headers and whole body of one request (HTTP_REQUEST_TIMEOUT_MS). */
  requestTimeoutMs?: number;
  /** Largest list page read (decoded); a bigger one fails with ResponseTooLargeError (SYNC_MAX_PAGE_BYTES). */
  maxBodyBytes?: number;
  /** Largest resolve answer read (decoded): one record (SYNC_MAX_RESOLVE_BYTES). */
  maxRecordBodyBytes?: number;
  /** Called once per HTTP response (or transport failure, status 0), for metrics. */
  onResponse?: (event: ResponseEvent) => void;
}

/** `route` is the templated path, so metrics keep a bounded set of labels. */
export interface ResponseEvent {
  method: HttpMethod;
  route: string;
  status: number;
  durationMs: number;
}

export interface PageParams {
  offset: number;
  limit: number;
}

/**
 * A list page as received: the body's bytes and each record's byte range,
 * nothing parsed but the envelope (see page-spans.ts). What the sync uses,
 * so that it parses only the records whose bytes changed.
 */
export interface RecordPage {
  total: number;
  offset: number;
  limit: number;
  body: Buffer;
  spans: RecordSpan[];
  unknownKeys: string[];
  /** A leader mirror's freshness headers (./source-freshness.ts); undefined from the service itself. */
  source?: SourceFreshness;
}

/** A leader's feed page: its body as received (`{"events":[...],"next":N}`, or a 410's), and its freshness. */
export interface FeedBytes {
  gone: boolean;
  body: Buffer;
  source?: SourceFreshness;
}

/**
 * 404 on resolve is a result, not an error: the id is simply unknown upstream.
 * A found user is a received record (./user-record.ts): `rawJson` is the body
 * as received (what the mirror stores); `warnings` name the fields dropped
 * from `user` because they broke their rule.
 */
export type ResolveResult = (({ found: true } & ReceivedUser) | { found: false }) & {
  /** A leader mirror's freshness headers, on its 404 too (./source-freshness.ts); undefined from the service itself. */
  source?: SourceFreshness;
};

/** 404 on delete means "already gone": callers treat it as done. */
export type DeleteMemberResult = { outcome: 'deleted'; body: unknown } | { outcome: 'not_found' };

interface Target {
  pool: Pool;
  /** Path prefix of the configured URL (e.g. `/api`), without trailing slash. */
  prefix: string;
  headers: Record<string, string>;
  /** Said with an untrusted certificate: where a private CA is given (the team's target). */
  untrustedHint?: string;
}

interface ByteResponse {
  status: number;
  bytes: Buffer;
  /** The body went past its bound and `bytes` is its head (only where the bound keeps a head). */
  truncated: boolean;
  retryAfter: string | undefined;
  headers: IncomingHttpHeaders;
}

interface RawResponse {
  status: number;
  /** Parsed JSON; undefined for an empty body; for an error body that is not JSON, a prefix of its text. */
  body: unknown;
  /** False when a non-empty body failed to parse as JSON. */
  json: boolean;
  retryAfter: string | undefined;
  headers: IncomingHttpHeaders;
}

export class ServiceClient {
  private readonly pools = new Map<string, Pool>();
  private readonly team: Target | undefined;
  private readonly management: Target | undefined;
  /** Every resolve answer's, with the read slots they share. */
  private readonly recordBound: BodyBound;

  constructor(private readonly options: ServiceClientOptions) {
    this.recordBound = recordBound(options.maxRecordBodyBytes);
    const header = (options.apiKeyHeader ?? 'x-service-api-key').toLowerCase();
    if (options.baseUrl !== undefined && options.apiKey !== undefined) {
      this.team = {
        ...this.target(
          options.baseUrl,
          { accept: 'application/json', 'accept-encoding': ACCEPT_ENCODING, [header]: options.apiKey },
          options.serviceCa,
        ),
        untrustedHint:
          options.serviceCa === undefined
            ? "a private CA's PEM file goes in SERVICE_CA_FILE"
            : 'the CA(s) in SERVICE_CA_FILE did not sign it',
      };
    }
    if (options.managementUrl !== undefined && options.managementKey !== undefined) {
      this.management = this.target(options.managementUrl, {
        accept: 'application/json',
        'x-management-key': options.managementKey,
      });
    }
  }

  /** One page as bytes cut into records, none of them parsed: what the sync engine uses. */
  async listUserRecords(params: PageParams, signal?: AbortSignal): Promise<RecordPage> {
    const path = '/v2/user/';
    const bound = pageBound(this.options.maxBodyBytes);
    const res = await this.sendBytes(this.teamTarget('GET', path), 'GET', path, path + pageQuery(params, path), signal, bound);
    if (res.status !== 200) throw this.httpError(asJson(res, 'GET', path), 'GET', path);
    const scan = scanRecordSpans(res.bytes);
    if (!scan.ok) throw new ResponseValidationError(`body is not valid JSON: ${scan.reason}`, 'GET', path);
    // The records are checked one by one later; here only that `users` is an array.
    const envelope = UserPageEnvelopeSchema.safeParse(scan.hasRecords ? { ...scan.members, users: [] } : scan.members);
    if (!envelope.success) throw new ResponseValidationError(formatIssues(envelope.error.issues), 'GET', path);
    const { users: _users, total, offset, limit, ...rest } = envelope.data;
    const source = sourceFreshnessOf(res.headers);
    if (source instanceof Error) throw new ResponseValidationError(source.message, 'GET', path);
    return { total, offset, limit, unknownKeys: Object.keys(rest), body: res.bytes, spans: scan.spans, ...(source && { source }) };
  }

  /**
   * One page of a leader mirror's change feed (src/replica, GET CHANGES_PATH), as bytes with its
   * freshness: what a follower tails (src/sync/follow-feed.ts). A 410 (cursor gone) is a result.
   */
  async leaderFeedPage(after: number, limit: number, signal?: AbortSignal): Promise<FeedBytes> {
    const route = CHANGES_PATH;
    const path = `${route}?after=${Math.max(0, Math.floor(after))}&limit=${Math.floor(limit)}`;
    const res = await this.sendBytes(this.teamTarget('GET', route), 'GET', route, path, signal, pageBound(this.options.maxBodyBytes));
    if (res.status !== 200 && res.status !== 410) throw this.httpError(asJson(res, 'GET', route), 'GET', route);
    const source = sourceFreshnessOf(res.headers);
    if (source instanceof Error) throw new ResponseValidationError(source.message, 'GET', route);
    return { gone: res.status === 410, body: res.bytes, ...(source && { source }) };
  }

  async resolveUser(clientUserId: string, signal?: AbortSignal): Promise<ResolveResult> {
    const route = '/v2/user/resolve/{client_user_id}';
    requireId('client_user_id', clientUserId, 'GET', route);
    const path = `/v2/user/resolve/${encodePathSegment(clientUserId)}`;
    const res = await this.send(this.teamTarget('GET', route), 'GET', route, path, signal, this.recordBound);
    if (res.status !== 200 && res.status !== 404) throw this.httpError(res, 'GET', path);
    const source = sourceFreshnessOf(res.headers);
    if (source instanceof Error) throw new ResponseValidationError(source.message, 'GET', path);
    if (res.status === 404) return { found: false, ...(source && { source }) };
    const parsed = parseUser(res.body);
    if (!parsed.ok) throw new ResponseValidationError(parsed.issues, 'GET', path);
    return { found: true, user: parsed.user, rawJson: JSON.stringify(res.body), warnings: parsed.warnings, ...(source && { source }) };
  }

  async deleteOrgMember(orgId: string, memberId: string, signal?: AbortSignal): Promise<DeleteMemberResult> {
    const route = '/v1/org/{org_id}/member/{member_id}';
    requireId('org_id', orgId, 'DELETE', route);
    requireId('member_id', memberId, 'DELETE', route);
    if (this.management === undefined) {
      throw new RequestValidationError('MANAGEMENT_URL', 'no management URL and key configured', 'DELETE', route);
    }
    const path = `/v1/org/${encodePathSegment(orgId)}/member/${encodePathSegment(memberId)}`;
    const res = await this.send(this.management, 'DELETE', route, path, signal, DETAIL_BOUND);
    if (res.status === 404) return { outcome: 'not_found' };
    if (res.status < 200 || res.status >= 300) throw this.httpError(res, 'DELETE', path);
    return { outcome: 'deleted', body: res.body };
  }

  /**
   * Lets requests in flight finish, for up to CLOSE_WITHIN_MS, then drops
   * whatever connection is left: a close that waits on a connection that
   * never frees would keep the process alive for good.
   */
  async close(): Promise<void> {
    await Promise.all(
      [...this.pools.values()].map(async (pool) => {
        const closing = pool.close();
        if (!(await settleWithin(closing, CLOSE_WITHIN_MS))) await pool.destroy().catch(() => undefined);
        await closing.catch(() => undefined);
      }),
    );
  }

  private teamTarget(method: HttpMethod, route: string): Target {
    if (this.team === undefined) {
      throw new RequestValidationError('SERVICE_BASE_URL', 'no service base URL and key configured', method, route);
    }
    return this.team;
  }

  /**
   * `ca`: the private CA the origin's certificate is verified against (the team's origin only; the pool is
   * the origin's, so a management URL on the same origin is the same server and verified the same way).
   */
  private target(url: string, headers: Record<string, string>, ca?: string): Target {
    const parsed = new URL(url);
    let pool = this.pools.get(parsed.origin);
    if (pool === undefined) {
      pool = new Pool(parsed.origin, {
        connections: this.options.connections ?? 8,
        headersTimeout: this.options.headersTimeoutMs ?? 30_000,
        bodyTimeout: this.options.bodyTimeoutMs ?? 60_000,
        connectTimeout: 10_000,
        pipelining: 1,
        ...(ca === undefined ? {} : { connect: { ca } }),
      });
      this.pools.set(parsed.origin, pool);
    }
    return { pool, prefix: parsed.pathname.replace(/\/+$/, ''), headers };
  }

  private async send(
    target: Target,
    method: HttpMethod,
    route: string,
    path: string,
    signal: AbortSignal | undefined,
    bound: BodyBound,
  ): Promise<RawResponse> {
    return asJson(await this.sendBytes(target, method, route, path, signal, bound), method, path);
  }

  private async sendBytes(
    target: Target,
    method: HttpMethod,
    route: string,
    path: string,
    signal: AbortSignal | undefined,
    bound: BodyBound,
  ): Promise<ByteResponse> {
    const started = performance.now();
    const report = (status: number) => this.options.onResponse?.({ method, route, status, durationMs: performance.now() - started });
    const deadline = startDeadline(this.options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS, signal);
    try {
      let response: Dispatcher.ResponseData;
      try {
        response = await target.pool.request({ method, path: target.prefix + path, headers: target.headers, signal: deadline.signal });
      } catch (err) {
        report(0);
        throw transportError(err, method, path, deadline, target.untrustedHint);
      }
      const status = response.statusCode;
      const fitted = fittedBound(bound, status);
      const body = await readAnswerBody(response, fitted).catch((err: unknown) => {
        report(0);
        throw err instanceof BodyCodingError
          ? new ResponseValidationError(err.message, method, path)
          : transportError(err, method, path, deadline);
      });
      report(status);
      if (!body.ok && !fitted.keepHead) throw new ResponseTooLargeError(fitted.bytes, fitted.setting, method, path);
      const retryAfter = response.headers['retry-after'];
      const headers = response.headers;
      return {
        status,
        bytes: body.bytes,
        truncated: !body.ok,
        retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter,
        headers,
      };
    } finally {
      deadline.clear();
    }
  }

  private httpError(res: RawResponse, method: HttpMethod, path: string): HttpError {
    const body = ErrorBodySchema.safeParse(res.body);
    return new HttpError(res.status, method, path, body.success ? body.data.detail : undefined, parseRetryAfter(res.retryAfter), {
      bodyKind: bodyKindOf(res, body.success),
    });
  }
}

function asJson(res: ByteResponse, method: HttpMethod, path: string): RawResponse {
  const text = res.bytes.toString('utf8');
  // A head cut at its bound is not JSON, nor meant to be parsed: kept as text for the message.
  const parsed = res.truncated ? { body: text.slice(0, 200), json: false } : parseJson(text, res.status, method, path);
  return { status: res.status, ...parsed, retryAfter: res.retryAfter, headers: res.headers };
}

function bodyKindOf(res: RawResponse, isObject: boolean): ErrorBodyKind {
  if (!res.json) return 'not-json';
  if (res.body === undefined) return 'empty';
  return isObject ? 'object' : 'other-json';
}

/** A 2xx body must be JSON; an error body may be anything (proxies send HTML). */
function parseJson(text: string, status: number, method: HttpMethod, path: string): { body: unknown; json: boolean } {
  if (text === '') return { body: undefined, json: true };
  try {
    return { body: JSON.parse(text) as unknown, json: true };
  } catch {
    if (status >= 200 && status < 300) throw new ResponseValidationError('body is not valid JSON', method, path);
    return { body: text.length > 200 ? text.slice(0, 200) : text, json: false };
  }
}

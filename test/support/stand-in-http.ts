/** Plain-fetch helpers for the stand-in tests: deliberately not the project's client. */
import type { StandIn } from '../../src/stand-in/index.js';

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  body: unknown;
}

export async function call(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, init);
  const text = await res.text();
  const isJson = res.headers.get('content-type')?.startsWith('application/json') ?? false;
  return { status: res.status, headers: res.headers, text, body: isJson ? (JSON.parse(text) as unknown) : undefined };
}

export function teamHeaders(s: StandIn): Record<string, string> {
  return { [s.apiKeyHeader]: s.apiKey, accept: 'application/json' };
}

export function managementHeaders(s: StandIn): Record<string, string> {
  return { 'X-Management-Key': s.managementKey };
}

export function getTeam(s: StandIn, pathAndQuery: string): Promise<Answer> {
  return call(`${s.baseUrl}${pathAndQuery}`, { headers: teamHeaders(s) });
}

export function deleteMember(s: StandIn, orgId: string, memberId: string, headers = managementHeaders(s)): Promise<Answer> {
  return call(`${s.managementUrl}/v1/org/${orgId}/member/${memberId}`, { method: 'DELETE', headers });
}

export interface Page {
  users: Array<Record<string, unknown>>;
  total: number;
  offset: number;
  limit: number;
}

export async function getPage(s: StandIn, offset: number, limit: number, path = '/v2/user'): Promise<Page> {
  const answer = await getTeam(s, `${path}?offset=${offset}&limit=${limit}`);
  if (answer.status !== 200) throw new Error(`page ${offset}: HTTP ${answer.status} ${answer.text}`);
  return answer.body as Page;
}

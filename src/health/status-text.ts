/**
 * `user-mirror status` as a person reads it: the report (./status-report.ts)
 * rendered as lines, the trouble first. Pure: no I/O.
 */
import type { CandidateCounts } from '../../db/sync-runs.js';
import { formatAge, oneLine } from './staleness.js';
import type { BackupFacts, ExportFacts, QueueCounts, RestoreFileFacts, RunFacts } from './status-facts.js';
import type { NewestRestore } from '../../db/lineage.js';
import type { RemovalQueueReport, StatusReport } from './status-report.js';
import type { WalVerdict } from './wal-verdict.js';
import { fullDiskWords } from '../../db/disk-space.js';
import type { DiskVerdict } from './disk-verdict.js';

/** 1.5 MB, 433 MB: sizes for a status line. */
function formatBytes(n: number): string {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GB`;
}

export function formatStatusReport(r: StatusReport): string {
  const lines: string[] = [];
  const m = r.mirror;
  lines.push(`mirror ${m.id} (${m.path})`);
  if (m.disk !== undefined && m.disk.state !== 'ok') lines.push(formatDisk(m.disk, m.path));
  const blame = walBlame(m.disk, m.path);
  if (!m.available) {
    lines.push(`  unavailable: ${m.error ?? 'unknown error'}`);
    if (m.lastAttemptFailed != null)
      lines.push(`  LAST SYNC FAILED at ${m.lastAttemptFailed.at}: ${oneLine(m.lastAttemptFailed.reason, 300)}`);
  } else {
    lines.push(`  users         ${m.activeUsers ?? 0} active, ${m.deletedUsers ?? 0} deleted`);
    const age =
      m.ageSeconds === null || m.ageSeconds === undefined
        ? 'never synced successfully'
        : `${formatAge(m.ageSeconds)} ago (${m.lastSucceededAt ?? ''})`;
    lines.push(`  last success  ${age}`);
    if (m.source !== undefined) lines.push(`  source        leader published at ${m.source.at} (age ${formatAge(m.source.ageSeconds)})`);
    if (m.stale === true) lines.push(`  STALE         ${oneLine(m.staleReason ?? 'no succeeded sync', 400)}`);
    const failed = m.lastAttemptFailed;
    if (failed !== null && failed !== undefined) {
      const which = failed.run === null ? 'LAST SYNC FAILED (no run recorded)' : `LAST SYNC FAILED (run #${failed.run})`;
      lines.push(`  ${which} at ${failed.at}: ${oneLine(failed.reason, 300)}`);
    }
    const partial = m.lastRunPartial;
    if (partial != null) lines.push(`  LAST SYNC PARTIAL (run #${partial.run}) at ${partial.at}: ${oneLine(partial.reason, 300)}`);
    if (m.checkpointFailed != null) {
      lines.push(
        `  CHECKPOINT FAILED at ${m.checkpointFailed.at}: ${oneLine(m.checkpointFailed.reason, 300)} ` +
          '(the WAL keeps growing until one succeeds; each sync retries it first)',
      );
    }
    if (m.wal !== undefined) lines.push(m.wal.checkpoints === 'external' ? externalWalLine(m.wal) : walLine(m.wal, blame));
    if (m.wal !== undefined) {
      const free = m.freeBytes === undefined ? '' : `, ${formatBytes(m.freeBytes)} of it free pages that later syncs reuse`;
      lines.push(`  file          ${formatBytes(m.wal.mirrorBytes)}${free}`);
    }
    if (m.disk !== undefined && m.disk.state === 'ok') lines.push(formatDisk(m.disk, m.path));
    const cp = m.lastCheckpoint;
    if (cp !== undefined && cp.walFrames > cp.copiedFrames) {
      const held = cp.walFrames - cp.copiedFrames;
      lines.push(
        blame === undefined
          ? `  checkpoint    ${held} of ${cp.walFrames} WAL frames held back by a reader at ${cp.at} (a long read transaction; docs/sql.md)`
          : `  checkpoint    ${held} of ${cp.walFrames} WAL frames not copied at ${cp.at}: ${blame}`,
      );
    }
    if (m.restore != null) lines.push(...restoreLines(m.restore));
    if (m.fieldWarnings !== null && m.fieldWarnings !== undefined) lines.push(`  field warnings ${formatWarnings(m.fieldWarnings)}`);
    lines.push(...formatFindings(r));
    const runs = m.lastRuns ?? [];
    if (runs.length === 0) lines.push('  runs          none yet');
    else {
      lines.push('  last runs');
      for (const run of runs) {
        const took =
          run.finishedAt === null ? 'running' : formatAge(Math.round((Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000));
        const changes = `+${run.created} ~${run.updated} -${run.deleted}${formatMissing(run.candidates)}`;
        const error = run.error === null ? '' : `  ${oneLine(run.error)}`;
        lines.push(
          `    #${String(run.id).padEnd(5)} ${run.status.padEnd(9)} ${run.startedAt}  ${took.padEnd(8)} seen ${run.usersSeen}  ${changes}${error}`,
        );
        const anomalies = formatAnomalies(run);
        if (anomalies !== '') lines.push(`           ANOMALIES ${anomalies}`);
      }
    }
  }
  if (m.restoreFiles !== undefined) lines.push(...restoreFileLines(m.restoreFiles));
  if (r.queues.reachable) {
    lines.push('queues');
    lines.push(`  sync          ${formatCounts(r.queues.sync)}`);
    const removals = r.queues.removals;
    if (removals === null) lines.push('  removals      not shown: MANAGEMENT_URL is unset (it names the queue)');
    else {
      lines.push(`  removals      ${formatCounts(removals.counts)}   (all hosts; target ${removals.target.id}, ${removals.target.url})`);
      for (const h of removals.hosts) {
        lines.push(
          `    ${h.host.padEnd(20)} ${Object.entries(h.outcomes)
            .map(([s, n]) => `${s} ${n}`)
            .join(', ')}  (recent; in that host's audit)`,
        );
      }
    }
    if (r.queues.unboundRemovals > 0) {
      lines.push(
        `  UNBOUND       ${r.queues.unboundRemovals} removal(s) name no target and are taken by no worker: run 'user-mirror removals adopt --all' where MANAGEMENT_URL is their target`,
      );
    }
  } else {
    lines.push(`queues: redis unreachable (${oneLine(r.queues.error)}); queue depths unknown`);
  }
  const failed = [
    r.failedRemovals.queue === null ? undefined : `${r.failedRemovals.queue} in the queue`,
    r.failedRemovals.audit === null ? undefined : `${r.failedRemovals.audit} in the audit`,
  ].filter((x): x is string => x !== undefined);
  lines.push(
    `failed removals ${failed.length === 0 ? 'unknown' : failed.join(', ')}${r.failedRemovals.audit === null ? '' : " (this host's audit)"}`,
  );
  if (r.audit !== null && r.audit.judged) {
    lines.push(
      r.audit.writable
        ? `audit           writable (${r.audit.path})`
        : `AUDIT NOT WRITABLE ${oneLine(r.audit.problem ?? '', 300)}: a removal worker here cannot record what it does; its removals wait until it can (free the disk, fix the mount or the owner)`,
    );
  }
  if (r.removalQueue !== null) lines.push(...formatRemovalQueue(r.removalQueue));
  if (r.changeFeed !== null) {
    const f = r.changeFeed;
    lines.push(
      `change feed     latest cursor ${f.latest}, oldest held ${f.oldest ?? 'none'}${f.prunedThrough > 0 ? ` (retention dropped up to ${f.prunedThrough})` : ''}`,
    );
  }
  const w = r.webhooks;
  if (w !== null) {
    const behind = w.eventsBehind === 0 ? 'caught up' : `BEHIND ${w.eventsBehind} events (${formatAge(w.secondsBehind)})`;
    lines.push(
      `webhooks        ${behind}, ${w.failed} failed${w.failed > 0 ? " ('user-mirror webhooks --failed')" : ''}   (target ${w.target}, ${w.url})`,
    );
    if (w.endpointFailing !== null) {
      lines.push(
        `webhooks        ENDPOINT FAILING since ${w.endpointFailing.since} (${w.endpointFailing.last}): every event held, none lost; fix WEBHOOK_URL or the receiver`,
      );
    }
    if (w.held !== null) lines.push(`webhooks        HELD: the daemon queues no delivery on this Redis: ${w.held}`);
    if (w.lagging)
      lines.push(
        `webhooks        LAGGING ${formatAge(w.secondsBehind)} behind, above WEBHOOK_LAG_WARN_SECONDS (${w.lagWarnSeconds}s): the receiver is too slow or does not answer`,
      );
    if (w.retrying !== null)
      lines.push(
        `webhooks        retrying ${w.retrying.eventId} (cursor ${w.retrying.cursor}), ${w.retrying.attempts} attempt(s), last: ${oneLine(w.retrying.last, 200)}`,
      );
  } else if (r.webhooksConfigured) lines.push('webhooks        unknown: redis unreachable');
  if (r.backups !== null) lines.push(...backupLines(r.backups));
  if (r.exports != null) lines.push(...exportLines(r.exports));
  return `${lines.join('\n')}\n`;
}

/** The newest published run's records not stored and its standing identity conflicts, with their ids. */
function formatFindings(r: StatusReport): string[] {
  const lines: string[] = [];
  const rejected = r.mirror.rejectedRecords;
  if (rejected != null) {
    lines.push(`  REJECTED      ${rejected.count} record(s) listed by the service but not stored by run #${rejected.run}:`);
    for (const x of rejected.records)
      lines.push(
        `    user_id ${x.userId ?? '-'}  client_user_id ${x.clientUserId ?? '-'}  (offset ${x.offset}, #${x.index}): ${oneLine(x.reason, 300)}`,
      );
    if (rejected.count > rejected.records.length) lines.push(`    … ${rejected.count - rejected.records.length} more in rejected_records`);
  }
  const c = r.mirror.identityConflicts;
  if (c != null && c.standing > 0) {
    lines.push(
      `  IDENTITY CONFLICTS ${c.standing} of run #${c.run}'s ${c.count}: the service lists an id the mirror does not hold as listed (the later listing won):`,
    );
    for (const x of c.conflicts)
      lines.push(
        x.kind === 'user_id'
          ? `    user_id ${x.userId} listed as client_user_id ${x.earlier} and later ${x.later}: resolve ${x.earlier} finds no user`
          : `    client_user_id ${x.clientUserId} listed for user ${x.earlier} and later ${x.later}: ${x.earlier} is stored deleted`,
      );
    if (c.standing > c.conflicts.length) lines.push(`    … ${c.standing - c.conflicts.length} more in identity_conflicts`);
  }
  const d = r.mirror.schemaDrift;
  if (d != null) {
    const rules = d.byRule.map((x) => `${x.rule} ${x.records}`).join(', ');
    lines.push(`  schema drift  run #${d.runId} wrote records with warnings: ${rules} (docs/alerts.md#schema-drift)`);
    for (const x of d.newPairs) lines.push(`    first seen: ${x.field} ${x.rule} (${x.records} record(s))`);
  }
  return lines;
}

function formatRemovalQueue(q: RemovalQueueReport): string[] {
  const settings = `appendonly ${q.redis.appendonly}, appendfsync ${q.redis.appendfsync}, maxmemory-policy ${q.redis.maxmemoryPolicy}`;
  const verdict =
    q.state === 'held'
      ? 'HELD: a removal worker takes no job from this Redis'
      : q.volatileAllowed
        ? 'running on a volatile Redis (ALLOW_VOLATILE_REDIS=1)'
        : 'durable';
  const lines = [`removal queue   ${verdict}`, `  redis         ${settings}`];
  for (const reason of q.reasons) lines.push(`  why           ${reason}`);
  for (const warning of q.warnings) lines.push(`  warning       ${warning}`);
  if (q.state === 'held' && q.fix !== undefined) lines.push(`  fix           ${q.fix}`);
  return lines;
}

/** What the run's listing did wrong, one phrase each; '' when nothing. */
function formatAnomalies(run: Pick<RunFacts, 'anomalies' | 'totalAtStart'>): string {
  const a = run.anomalies;
  const parts = [
    a.identityConflicts > 0
      ? `${a.identityConflicts} identity conflict(s) (the later listing won; ids in the sync.identity_conflict log lines)`
      : '',
    a.oversizePages > 0 ? `${a.oversizePages} page(s) larger than the limit asked` : '',
    a.totalLowest !== null && run.totalAtStart !== null && a.totalLowest < run.totalAtStart
      ? `total fell from ${run.totalAtStart} to ${a.totalLowest} during the scan`
      : '',
  ].filter((p) => p !== '');
  return parts.join('; ');
}

/** Only confirmed users are deleted: say what became of the others. */
function formatMissing(c: CandidateCounts): string {
  if (c.candidates === 0) return '';
  const open = [c.unverified > 0 ? `${c.unverified} unchecked` : '', c.deferred > 0 ? `${c.deferred} deferred` : ''].filter(
    (x) => x !== '',
  );
  return `  missing ${c.candidates} (${c.confirmedGone} gone, ${c.stillThere} still there${open.length > 0 ? `, ${open.join(', ')}` : ''})`;
}

/** The WAL when user-mirror checkpoints it after each sync: its file is what waits. */
/** The WAL when user-mirror checkpoints it; `blame`: a low or full disk, when that is the likelier cause than a reader. */
function walLine(w: WalVerdict, blame: string | undefined): string {
  const ratio = w.mirrorBytes > 0 ? ` (${(w.walBytes / w.mirrorBytes).toFixed(1)}× the mirror)` : '';
  return w.tooLarge
    ? `  WAL TOO LARGE ${formatBytes(w.walBytes)}${ratio}, above ${formatBytes(w.warnAtBytes)} (MIRROR_WAL_WARN_BYTES): ` +
        (blame ??
          'a read transaction held open (an analytics session, a lingering reader) keeps every checkpoint from finishing; end it (docs/sql.md)')
    : `  wal           ${formatBytes(w.walBytes)}${ratio}`;
}

/** The WAL when Litestream checkpoints it (MIRROR_CHECKPOINTS=external): the file keeps its largest size; what waits is the part not yet copied. */
function externalWalLine(w: WalVerdict): string {
  const owner = 'checkpoints external (MIRROR_CHECKPOINTS=external)';
  if (w.pendingBytes === undefined) {
    return w.tooLarge
      ? `  WAL TOO LARGE ${formatBytes(w.walBytes)}, above ${formatBytes(w.warnAtBytes)} (MIRROR_WAL_WARN_BYTES), ${owner}, no WAL index to say how much is copied: is Litestream running?`
      : `  wal           ${formatBytes(w.walBytes)} file, ${owner}; no WAL index open to say how much of it is copied`;
  }
  const frames = `${(w.frames ?? 0) - (w.backfilledFrames ?? 0)} of ${w.frames ?? 0} frames`;
  return w.tooLarge
    ? `  WAL TOO LARGE ${formatBytes(w.pendingBytes)} not yet copied into the mirror (${frames}), above ${formatBytes(w.warnAtBytes)} ` +
        `(MIRROR_WAL_WARN_BYTES), ${owner}: no checkpoint copies it; is Litestream running? (a read transaction held open also holds it back; docs/sql.md)`
    : `  wal           ${formatBytes(w.pendingBytes)} not yet copied into the mirror (${frames}), file ${formatBytes(w.walBytes)}, ${owner}`;
}

function formatWarnings(w: { usersWithWarnings: number; topFields: Array<{ field: string; count: number }> }): string {
  if (w.usersWithWarnings === 0) return 'none';
  const top = w.topFields.map((f) => `${f.field} ${f.count}`).join(', ');
  return `${w.usersWithWarnings} users (${top})`;
}

function formatCounts(c: QueueCounts): string {
  return `waiting ${c.waiting}  active ${c.active}  delayed ${c.delayed}  failed ${c.failed}  completed ${c.completed}`;
}

/** The scheduled backups: the last good copy, and a failure or staleness in capitals (both make `status` exit 1). */
function backupLines(b: BackupFacts): string[] {
  const last =
    b.lastGoodAt === null ? 'none yet' : `${formatAge(b.ageSeconds ?? 0)} ago (${b.lastGoodAt}), ${formatBytes(b.lastGoodBytes ?? 0)}`;
  const lines = [`backups         last good ${last}   (${b.dir}, every "${b.cron}")`];
  if (b.failed !== null) lines.push(`backups         LAST BACKUP FAILED: ${oneLine(b.failed, 300)}`);
  if (b.stale)
    lines.push(`backups         STALE: no good backup within twice the BACKUP_CRON interval; is the daemon running, is ${b.dir} writable?`);
  return lines;
}

/** The newest restore: when, from which backup, the cursors the replaced file issued that are lost, the history gap. */
function restoreLines(x: NewestRestore): string[] {
  const run = x.backupRunId === null ? '' : ` (its last published run #${x.backupRunId})`;
  const count = x.restores > 1 ? `; ${x.restores} restores in all` : '';
  const lost =
    x.replacedCursor === null
      ? `the replaced file could not be read: cursors after ${x.backupCursor} it may have issued are lost`
      : x.replacedCursor > x.backupCursor
        ? `cursors ${x.backupCursor + 1}–${x.replacedCursor} the replaced file issued are lost`
        : 'no cursor the replaced file issued is lost';
  const gapEnd = x.gapTo === null ? 'the next sync' : x.gapTo;
  return [
    `  restored      ${x.at} from the backup taken ${x.backupAt}${run}${count}`,
    `                ${lost} (a consumer past ${x.backupCursor} is told to resume there); new cursors start after ${x.cursorBase}`,
    `                history gap ${x.backupAt} – ${gapEnd}: --as-of there answers "unknown"`,
  ];
}

/** Killed restores' copies and replaced files beside the mirror: said with their size, never deleted here. */
function restoreFileLines(f: RestoreFileFacts): string[] {
  const lines = f.leftovers.map((l) =>
    l.running
      ? `restore copy    ${l.path} (${formatBytes(l.bytes)}): restore pid ${l.pid} still runs`
      : `LEFTOVER        ${l.path} (${formatBytes(l.bytes)}) of restore pid ${l.pid}, which no longer runs (killed): the next restore removes it, or remove it and its -wal, -shm`,
  );
  const r = f.replaced;
  if (r !== null)
    lines.push(
      `replaced files  ${r.count} kept beside the mirror, ${formatBytes(r.bytes)}, the oldest from ${r.oldest.at} (${r.oldest.path}): ` +
        'remove those no longer needed (docs/backup.md)',
    );
  return lines;
}

/** The scheduled exports: the last good one, and a failure or staleness in capitals (both make `status` exit 1). */
function exportLines(e: ExportFacts): string[] {
  const last = e.lastGoodAt === null ? 'none yet' : `${e.lastGoodAt}, ${e.lastGoodRows ?? 0} rows, ${formatBytes(e.lastGoodBytes ?? 0)}`;
  const lines = [`exports         last good ${last}   (${e.dir}, every "${e.cron}")`];
  if (e.failed !== null) lines.push(`exports         LAST EXPORT FAILED: ${oneLine(e.failed, 300)}`);
  if (e.stale)
    lines.push(`exports         STALE: no good export within twice the EXPORT_CRON interval; is the daemon running, is ${e.dir} writable?`);
  return lines;
}

/** The disk line: the state first, in capitals when it needs an operator. */
function formatDisk(d: DiskVerdict, path: string): string {
  const of = `${formatBytes(d.freeBytes)} free of ${formatBytes(d.totalBytes)}`;
  if (d.state === 'read-only')
    return `  READ-ONLY     the file system holding MIRROR_DB (${path}) is mounted read-only (${of}): readers answer; syncs, checkpoints and restores cannot write until it is mounted read-write`;
  if (d.state === 'full')
    return `  DISK FULL     ${fullDiskWords(path, d.freeBytes)}; readers still answer, syncs fail until there is room`;
  if (d.state === 'low')
    return `  DISK LOW      ${of} on the file system holding MIRROR_DB, below ${formatBytes(d.warnBelowBytes)} (MIRROR_DISK_WARN_BYTES)`;
  return `  disk          ${of}`;
}

/** Why the WAL was not copied into the file, when a low or full disk is the likelier cause than a reader. */
function walBlame(d: DiskVerdict | undefined, path: string): string | undefined {
  if (d === undefined || d.state === 'ok') return undefined;
  const where =
    d.state === 'full'
      ? fullDiskWords(path, d.freeBytes)
      : d.state === 'read-only'
        ? `the file system holding MIRROR_DB (${path}) is mounted read-only`
        : `the file system holding MIRROR_DB (${path}) has only ${formatBytes(d.freeBytes)} free`;
  return `${where}: a checkpoint that must grow the file cannot finish; make room (docs/operations.md)`;
}

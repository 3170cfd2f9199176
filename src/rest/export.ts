import { requireParent } from '../auth/authorize.js';
import type { RequestContext } from '../context.js';
import { ApiError, ExportBusyError, InvalidFormatError, toApiError } from '../errors.js';
import { drained, type Exchange } from '../exchange.js';
import { endSpan, startSpan, inSpan, type Span } from '../ops/tracing.js';
import type { Logger } from '../logger.js';
import { exportChildAccounts, type ChildRow } from '../services/export-child-accounts.js';
import { isoTime } from '../domain/dates.js';
import { single } from './child-accounts.js';
import { queryParameters, sendRestError } from './http.js';

/*
 * The child-list export, streamed as CSV or NDJSON in batches, the next read once the client took the
 * last; a client that stops reading is cut off after EXPORT_STALL_MS.
 */

export const EXPORT_PATH = '/auth/parent/child-accounts/export';

export type ExportFormat = 'csv' | 'ndjson';

const MEDIA_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8; header=present',
  ndjson: 'application/x-ndjson; charset=utf-8',
};

export const CSV_HEADER = 'username,email,lastSeen,registered\r\n';

/** One CSV field (RFC 4180); a value a spreadsheet would run as a formula is prefixed with `'`. */
export function csvField(value: string): string {
  const safe = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

function csvLine(row: ChildRow): string {
  return `${csvField(row.username)},${csvField(row.email)},${isoTime(row.lastLoginMs) ?? ''},${isoTime(row.createdAtMs)}\r\n`;
}

function ndjsonLine(row: ChildRow): string {
  return `${JSON.stringify({ username: row.username, email: row.email, lastSeen: isoTime(row.lastLoginMs), registered: isoTime(row.createdAtMs) })}\n`;
}

export type ExportLimits = {
  /** Exports one instance runs at once. */
  maxConcurrent: number;
  /** How long a client may leave the stream unread before it is cut off. */
  stallMs: number;
};

export type Exports = {
  handle: (exchange: Exchange, context: RequestContext) => Promise<void>;
  /** Ends every running export (shutdown): each stops before its next batch. */
  abortAll: () => void;
  running: () => number;
};

class StalledError extends Error {
  constructor() {
    super('the client read nothing for EXPORT_STALL_MS');
  }
}

export function createExports(limits: ExportLimits & { maxQueryParameters: number }, logger: Logger): Exports {
  const running = new Set<string>();
  const aborts = new Set<AbortController>();

  let shuttingDown = false;

  async function handle(exchange: Exchange, context: RequestContext): Promise<void> {
    const parameters = queryParameters(exchange.query, limits.maxQueryParameters);
    let organizationId: string | undefined;
    try {
      const format = single(parameters, 'format') ?? 'csv';
      if (format !== 'csv' && format !== 'ndjson') throw new InvalidFormatError();
      const viewer = requireParent(await context.jwtViewer());
      const batches = exportChildAccounts(
        viewer,
        {
          search: single(parameters, 'search'),
          startDate: single(parameters, 'startDate'),
          endDate: single(parameters, 'endDate'),
        },
        context.services,
      );
      if (running.has(viewer.organization.parentId))
        throw new ExportBusyError('An export of this organization is already running; try again when it ends.');
      if (running.size >= limits.maxConcurrent)
        throw new ExportBusyError('This server runs as many exports as it allows; try again shortly.');
      organizationId = viewer.organization.parentId;
      running.add(organizationId);
      // The export's own span, its batches' reads under it, ended with the stream.
      const span = startSpan('export child accounts', { 'app.export.format': format });
      await inSpan(span, () => stream(exchange, format, batches, span));
    } catch (error) {
      const apiError = toApiError(error);
      if (!(error instanceof ApiError))
        logger.error('unexpected error before an export started', {
          error,
          requestId: exchange.requestId,
          code: apiError.code,
        });
      if (apiError.status === 429) exchange.addHeader('Retry-After', '5');
      sendRestError(exchange, apiError, { noStore: true });
    } finally {
      if (organizationId !== undefined) running.delete(organizationId);
    }
  }

  /** Writes the answer: headers at once, then batch by batch as the client reads. */
  async function stream(
    exchange: Exchange,
    format: ExportFormat,
    batches: AsyncIterable<ChildRow[]>,
    span: Span | undefined,
  ): Promise<void> {
    const { response } = exchange;
    const date = new Date().toISOString().slice(0, 10);
    exchange.startStream(200, MEDIA_TYPES[format], {
      'Content-Disposition': `attachment; filename="child-accounts-${date}.${format}"`,
    });
    if (exchange.request.method === 'HEAD') {
      endSpan(span);
      response.end();
      return;
    }
    const abort = new AbortController();
    aborts.add(abort);
    const gone = () => abort.abort();
    response.on('close', gone);
    let rows = 0;
    let incomplete: string | undefined;
    try {
      if (format === 'csv') response.write(CSV_HEADER);
      const line = format === 'csv' ? csvLine : ndjsonLine;
      for await (const batch of batches) {
        if (abort.signal.aborted) throw new Error('the export was ended before it was complete');
        let chunk = '';
        for (const row of batch) chunk += line(row);
        rows += batch.length;
        if (!response.write(chunk) && !(await drained(response, limits.stallMs, abort.signal)))
          throw new StalledError();
      }
      exchange.record.code = undefined;
      response.end();
    } catch (error) {
      // The answer has begun: the only way to say it is incomplete is to end the connection
      // without the final chunk, which every HTTP client reports as an error.
      const reason =
        error instanceof StalledError
          ? 'client stalled'
          : shuttingDown
            ? 'shutdown'
            : response.destroyed
              ? 'client gone'
              : 'error';
      incomplete = reason;
      exchange.record.code = 'EXPORT_INCOMPLETE';
      if (reason === 'error')
        logger.error('an export failed after it began', { error, requestId: exchange.requestId, rows });
      else logger.warn('an export ended before it was complete', { reason, requestId: exchange.requestId, rows });
      response.destroy();
    } finally {
      span?.setAttribute('app.export.rows', rows);
      endSpan(span, incomplete === undefined ? undefined : `EXPORT_INCOMPLETE: ${incomplete}`);
      response.off('close', gone);
      aborts.delete(abort);
    }
  }

  return {
    handle,
    abortAll: () => {
      shuttingDown = true;
      for (const abort of aborts) abort.abort();
    },
    running: () => running.size,
  };
}

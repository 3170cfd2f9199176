import type { ParentViewer } from '../auth/authorize.js';
import { parseDateRange } from '../domain/dates.js';
import type { ServiceContext } from './context.js';
import type { Position } from '../domain/pagination.js';
import { filterSql, readBatch, type ChildRow } from '../db/child-list.js';

export type { ChildRow };
import { validSearch } from './list-child-accounts.js';

/** Rows read at a time: one short keyset query each, so no statement or snapshot lives long. */
export const EXPORT_BATCH_ROWS = 1_000;

export type ExportFilters = { search?: string; startDate?: string; endDate?: string };

/**
 * The whole child list with the list's filters (decisions §4), newest registration first, as
 * batches of rows. The filters are checked before the first batch is asked for (so that a bad one
 * is refused before an answer starts); each batch is one keyset query after the previous batch's
 * last row, read where bounded staleness is allowed (a replica when one is usable).
 */
export function exportChildAccounts(
  viewer: ParentViewer,
  input: ExportFilters,
  context: ServiceContext,
): AsyncIterable<ChildRow[]> {
  const search = validSearch(input.search);
  const range = parseDateRange(input.startDate, input.endDate);
  const filters = filterSql(viewer.account.id, search, range);
  return {
    async *[Symbol.asyncIterator]() {
      let after: Position | undefined;
      for (;;) {
        const rows = await readBatch(context.staleReads, filters, after, EXPORT_BATCH_ROWS);
        if (rows.length > 0) yield rows;
        if (rows.length < EXPORT_BATCH_ROWS) return;
        const last = rows[rows.length - 1]!;
        after = { createdAt: new Date(last.createdAtMs), id: last.id };
      }
    },
  };
}

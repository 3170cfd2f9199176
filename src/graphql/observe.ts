import { getOperationAST, Kind, type DocumentNode, type ExecutionResult, type GraphQLError } from 'graphql';
import type { Plugin } from '@envelop/core';
import { ApiError, innermostError, toApiError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { RequestRecord } from '../context.js';
import { endSpan, recording, startOperationSpan, inSpan, type Span } from '../ops/tracing.js';

/** Root selections beyond this many are summarised: a label stays short whatever the document. */
const MAX_LABELLED_FIELDS = 8;

/** An operation's root fields, sorted, without aliases (`childAccounts,me`): a bounded label, unlike its name. */
export function operationLabel(document: DocumentNode, operationName: string | null | undefined): string {
  const operation = getOperationAST(document, operationName);
  if (!operation) return 'none';
  const fields = new Set<string>();
  for (const selection of operation.selectionSet.selections) {
    fields.add(selection.kind === Kind.FIELD ? selection.name.value : 'fragment');
  }
  const names = [...fields].sort();
  const label = names.length > MAX_LABELLED_FIELDS ? 'many' : names.join(',');
  return operation.operation === 'query' ? label : `${operation.operation}:${label}`;
}

/** The key of the operation a request names, as sent: no name and `""` differ. */
export function operationKey(operationName: string | null | undefined): string {
  return operationName == null ? '' : `"${operationName}`;
}

/** The request's record, when the context carries one (on its exchange). */
export function observedIn(context: unknown): RequestRecord | undefined {
  return (context as { exchange?: { record: RequestRecord } } | undefined)?.exchange?.record;
}

/** The code a client will read for this error: its own, or the API's mapping of what it wraps. */
function codeOf(error: GraphQLError | undefined): string | undefined {
  if (error === undefined) return undefined;
  const code = error.extensions?.['code'];
  if (typeof code === 'string') return code;
  const original = innermostError(error);
  return original === error ? undefined : toApiError(original).code;
}

/**
 * Records the operation's label and first error code on the request's record, and logs each resolver
 * error that is not the API's own, before it is masked.
 */
export function useObserve(logger: Logger): Plugin {
  return {
    onParse({ context }) {
      return ({ result }) => {
        const observed = observedIn(context);
        if (observed && result instanceof Error)
          observed.code = codeOf(result as GraphQLError) ?? 'GRAPHQL_PARSE_FAILED';
      };
    },
    onValidate({ context }) {
      return ({ valid, result }) => {
        const observed = observedIn(context);
        if (observed && !valid) observed.code = codeOf(result[0]) ?? 'GRAPHQL_VALIDATION_FAILED';
      };
    },
    onExecute({ args }) {
      const observed = observedIn(args.contextValue);
      if (observed) observed.operation = operationLabel(args.document, args.operationName);
      return {
        onExecuteDone({ result }) {
          if ('errors' in result) observeErrors(logger, args.contextValue, result.errors);
        },
      };
    },
  };
}

/** What an execution's errors leave in the request's record and the log, before they are masked. */
export function observeErrors(
  logger: Logger,
  contextValue: unknown,
  errors: readonly GraphQLError[] | undefined,
): void {
  if (!errors?.length) return;
  const observed = observedIn(contextValue);
  if (observed) observed.code ??= codeOf(errors[0]);
  const requestId = (contextValue as { requestId?: string }).requestId;
  for (const error of errors) {
    const original = innermostError(error);
    if (error.path === undefined || original instanceof ApiError) continue;
    logger.error('unexpected error in a GraphQL resolver', {
      error: original,
      requestId,
      path: error.path.join('.'),
      code: toApiError(original).code,
    });
  }
}

/** An operation span's status for a result: failed with its first error's code, if it has errors. */
export function spanFailure(result: unknown): string | undefined {
  const errors = (result as ExecutionResult | undefined)?.errors;
  if (!errors?.length) return undefined;
  return codeOf(errors[0]) ?? 'GRAPHQL_ERROR';
}

/** The span of a document's operation, under the active span; undefined unless that one is sampled. */
export function startDocumentSpan(
  document: DocumentNode,
  operationName: string | null | undefined,
  source: 'execution' | 'stream',
): Span | undefined {
  if (!recording()) return undefined;
  const operation = getOperationAST(document, operationName);
  return startOperationSpan(
    operation?.operation ?? 'query',
    operation?.name?.value ?? operationName,
    source,
    operationLabel(document, operationName),
  );
}

/** The GraphQL operation's span, made where the execution runs so that database spans hang under it. */
export function useTracing(): Plugin {
  return {
    onExecute({ args, executeFn, setExecuteFn }) {
      const span = startDocumentSpan(args.document, args.operationName, 'execution');
      if (!span) return;
      setExecuteFn((executeArgs) => inSpan(span, () => executeFn(executeArgs)));
      return {
        onExecuteDone({ result }) {
          endSpan(span, spanFailure(result));
        },
      };
    },
    onSubscribe({ args, subscribeFn, setSubscribeFn }) {
      const span = startDocumentSpan(args.document, args.operationName, 'stream');
      if (!span) return;
      setSubscribeFn((subscribeArgs) => inSpan(span, () => subscribeFn(subscribeArgs)));
      return {
        onSubscribeResult({ result }) {
          // A refusal is one result; a stream ends when its iteration does.
          if (!(Symbol.asyncIterator in (result as object))) return endSpan(span, spanFailure(result));
          return { onEnd: () => endSpan(span) };
        },
        onSubscribeError() {
          endSpan(span, 'SUBSCRIPTION_FAILED');
        },
      };
    },
  };
}

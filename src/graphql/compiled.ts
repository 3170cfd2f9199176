import {
  getOperationAST,
  isObjectType,
  Kind,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  type FragmentDefinitionNode,
  type GraphQLSchema,
  type SelectionSetNode,
} from 'graphql';
import { getVariableValues } from 'graphql/execution/values.js';
import { compileQuery, isCompiledQuery, type CompiledQuery } from 'graphql-jit';
import { makeExecute, type Plugin } from '@envelop/core';
import type { Logger } from '../logger.js';
import { operationKey } from './observe.js';

/** Executions by engine, for the metrics: compiled, reference, and documents that would not compile. */
export type ExecutionCounts = { compiled: number; reference: number; compileFailures: number };

/** The result in the reference executor's shape: `errors` before `data`, nothing added. */
export function asReference(result: ExecutionResult): ExecutionResult {
  if (!result.errors?.length)
    return result.extensions === undefined
      ? { data: result.data }
      : { data: result.data, extensions: result.extensions };
  return {
    errors: result.errors,
    data: result.data,
    ...(result.extensions === undefined ? {} : { extensions: result.extensions }),
  };
}

/**
 * Whether graphql-jit gives this operation's fields in graphql-js' order: it puts fragments' fields
 * after a set's own, in reverse, so the two agree only when fragments come last and name distinct types.
 */
function fieldsInReferenceOrder(
  schema: GraphQLSchema,
  document: DocumentNode,
  selectionSet: SelectionSetNode,
): boolean {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const seen = new Set<SelectionSetNode>();
  const check = (set: SelectionSetNode): boolean => {
    if (seen.has(set)) return true;
    seen.add(set);
    const conditions = new Set<string>();
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) {
        if (conditions.size > 0) return false;
        if (selection.selectionSet && !check(selection.selectionSet)) return false;
        continue;
      }
      const fragment = selection.kind === Kind.FRAGMENT_SPREAD ? fragments.get(selection.name.value) : selection;
      const condition = fragment?.typeCondition?.name.value;
      if (!fragment || !condition || conditions.has(condition) || !isObjectType(schema.getType(condition)))
        return false;
      conditions.add(condition);
      if (!check(fragment.selectionSet)) return false;
    }
    return true;
  };
  return check(selectionSet);
}

/**
 * Compiled execution (graphql-jit) for the documents clients repeat, answering byte for byte as the
 * reference executor (the differential test proves it). What stays on the reference executor:
 * non-queries, mistyped variables, documents that do not compile or would reorder fields.
 */
export function useCompiledExecution(options: {
  compileAfter: number;
  logger: Logger;
  counts: ExecutionCounts;
}): Plugin & {
  /** The operation's compiled query, once an execution compiled it. */
  compiledQuery(document: DocumentNode, operationName: string | null | undefined): CompiledQuery | undefined;
} {
  const { compileAfter, logger, counts } = options;
  const executions = new WeakMap<DocumentNode, number>();
  /** Per document, per operation name: the compiled query, or null when it did not compile. */
  const compiled = new WeakMap<DocumentNode, Map<string, CompiledQuery | null>>();

  function wanted({ document, operationName, schema, variableValues }: ExecutionArgs): boolean {
    const count = (executions.get(document) ?? 0) + 1;
    if (count <= compileAfter) {
      executions.set(document, count);
      return false;
    }
    const operation = getOperationAST(document, operationName);
    if (operation?.operation !== 'query') return false;
    const variables = operation.variableDefinitions ?? [];
    return variables.length === 0 || getVariableValues(schema, variables, variableValues ?? {}).errors === undefined;
  }

  function compiledFor(args: ExecutionArgs): CompiledQuery | null {
    let byName = compiled.get(args.document);
    if (!byName) compiled.set(args.document, (byName = new Map()));
    const name = operationKey(args.operationName);
    let entry = byName.get(name);
    if (entry === undefined) {
      const operation = getOperationAST(args.document, args.operationName)!;
      if (!fieldsInReferenceOrder(args.schema, args.document, operation.selectionSet)) {
        byName.set(name, null);
        return null;
      }
      const result = compileQuery(args.schema, args.document, args.operationName ?? undefined);
      entry = isCompiledQuery(result) ? result : null;
      if (!entry) {
        counts.compileFailures += 1;
        logger.warn('a query document did not compile; it runs on the reference executor', {
          errors: (result as ExecutionResult).errors?.map((e) => e.message),
        });
      }
      byName.set(name, entry);
    }
    return entry;
  }

  return {
    compiledQuery: (document, operationName) => compiled.get(document)?.get(operationKey(operationName)) ?? undefined,
    onExecute({ args, setExecuteFn }) {
      const query = wanted(args) ? compiledFor(args) : null;
      if (!query) {
        counts.reference += 1;
        return;
      }
      counts.compiled += 1;
      setExecuteFn(
        makeExecute(async (run) => asReference(await query.query(run.rootValue, run.contextValue, run.variableValues))),
      );
    },
  };
}

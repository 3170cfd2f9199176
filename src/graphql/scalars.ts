import { GraphQLError, Kind } from 'graphql';
import { isoTime } from '../domain/dates.js';
import { builder } from './builder.js';

export const DateTime = builder.scalarType('DateTime', {
  description: 'A point in time, as an ISO 8601 string in UTC (for example 2024-05-31T12:00:00.000Z).',
  // A string is a time the server formatted already (a cached page's rows hold theirs formatted).
  serialize: (value) => (typeof value === 'string' ? value : isoTime((value as Date).getTime())),
  parseValue: (value) => {
    const date = typeof value === 'string' ? new Date(value) : undefined;
    if (!date || Number.isNaN(date.getTime())) throw new GraphQLError('DateTime must be an ISO 8601 string.');
    return date;
  },
  parseLiteral: (ast) => {
    const date = ast.kind === Kind.STRING ? new Date(ast.value) : undefined;
    if (!date || Number.isNaN(date.getTime())) throw new GraphQLError('DateTime must be an ISO 8601 string.');
    return date;
  },
});

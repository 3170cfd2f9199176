import { createHash } from 'node:crypto';
import { Kind, parse, print, visit, type FieldNode, type SelectionSetNode } from 'graphql';

/**
 * The operations first-party clients run, kept here so that they are reviewed with the schema: a
 * test validates each against it. They serve twice:
 * - as persisted operations: a client may send `extensions.persistedQuery.sha256Hash` (the hex
 *   SHA-256 of the document text) instead of the document, and `GRAPHQL_PERSISTED_ONLY=true`
 *   refuses any other document. The ids are listed in `persisted-operations.json` beside this
 *   file (written by `npm run schema:print`);
 * - as the document GraphiQL opens with, one named operation per root field (a test executes
 *   each against the demo data).
 */
export type StoredOperation = { name: string; description: string; document: string };

const TYPENAME: FieldNode = { kind: Kind.FIELD, name: { kind: Kind.NAME, value: '__typename' } };

/**
 * A document as Apollo Client sends it: `__typename` added to every selection set but the
 * operation's own (where one is not there already), printed by graphql-js. Its hash is then the
 * one Apollo's persisted-query link computes, and a client cache can tell the types apart.
 */
export function asClientsSendIt(text: string): string {
  return print(
    visit(parse(text), {
      SelectionSet: {
        enter(node: SelectionSetNode, _key, parent) {
          if (parent && !Array.isArray(parent) && (parent as { kind?: string }).kind === Kind.OPERATION_DEFINITION)
            return undefined;
          if (node.selections.some((s) => s.kind === Kind.FIELD && s.name.value.startsWith('__'))) return undefined;
          return { ...node, selections: [...node.selections, TYPENAME] };
        },
      },
    }),
  );
}

const WRITTEN: readonly StoredOperation[] = [
  {
    name: 'Me',
    description: "The caller's own profile: a parent's carries the organization's credit and billing fields.",
    document: `query Me {
  me {
    userID
    username
    email
    accountType
    accountStatus
    organizationName
    lastLogin
    ... on ParentAccount {
      creditBalance
      totalChildAccounts
      billableChildAccounts
      authUrls { signin signup }
    }
    ... on ChildAccount {
      parentAccount
      signInCount
    }
  }
}`,
  },
  {
    name: 'Organization',
    description: "The organization's details (a child gets its parent's). Each answer counts as a retrieval.",
    document: `query Organization {
  organization {
    organizationName
    organizationUrl
    authUrls { signin signup verify reset update resend successful }
    domainRestrictionEnabled
    emailVerificationRequired
    providerASsoConfig { enabled clientId }
    credentials { publicKey jwtSecret }
  }
}`,
  },
  {
    name: 'ChildAccounts',
    description:
      "A parent's children, newest first, ten at a time: pass the last endCursor as $after for the next page. $search matches usernames and emails (case-insensitive).",
    document: `query ChildAccounts($search: String, $after: String) {
  childAccounts(search: $search, limit: 10, after: $after) {
    edges { node { username email lastSeen registered } }
    pageInfo { hasNextPage endCursor }
    stats { total active }
  }
}`,
  },
  {
    name: 'CreditAnalysis',
    description:
      "A parent's credit analysis: balance, usage this month, billable users, projection, alerts and purchases.",
    document: `query CreditAnalysis {
  creditAnalysis {
    creditBalance
    totalFreeUsers
    totalChildAccounts
    billableUsers
    monthlyRetentionCredits
    operationUsage { childSignups signIns emailVerifications socialSignIns { total } }
    totalCreditsUsed
    projectedMonthlyUsage
    alerts { low critical depleted }
    packageHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId }
  }
}`,
  },
  {
    name: 'CreditTrends',
    description:
      "A parent's forecast (when the balance reaches the low and critical thresholds and zero at the current burn rate) and its usage month by month, oldest first, for charts: $months from 1 to 36.",
    document: `query CreditTrends($months: Int = 12) {
  creditAnalysis {
    creditBalance
    alerts { low critical depleted }
    forecast { lowAt criticalAt depletedAt dailyBurn basis }
    usageHistory(months: $months) {
      month
      creditsUsed
      billableUsers
      retentionCredits
      creditsPurchased
      operationUsage { childSignups signIns emailVerifications socialSignIns { total } }
    }
  }
}`,
  },
  {
    name: 'CreditAnalysisLive',
    description:
      "Live: a parent's balance, usage, alerts and forecast at once, then again after each change that alters them (a sign-in, a purchase), at most once a second, over Server-Sent Events. Run it and sign in as one of the organization's children to see it move.",
    document: `subscription CreditAnalysisLive {
  creditAnalysisChanged {
    creditBalance
    totalChildAccounts
    operationUsage { signIns socialSignIns { total } }
    totalCreditsUsed
    alerts { low critical depleted }
    forecast { depletedAt dailyBurn }
  }
}`,
  },
];

/** The stored operations, as clients send them (see `asClientsSendIt`). */
export const STORED_OPERATIONS: readonly StoredOperation[] = WRITTEN.map((operation) => ({
  ...operation,
  document: asClientsSendIt(operation.document),
}));

/** Whether a stored operation is a subscription (answered as an event stream only). */

/** The id a client sends for a stored document: the hex SHA-256 of its exact text. */
export function operationId(document: string): string {
  return createHash('sha256').update(document).digest('hex');
}

/** Stored documents by id. */
export const PERSISTED_OPERATIONS: ReadonlyMap<string, string> = new Map(
  STORED_OPERATIONS.map((o) => [operationId(o.document), o.document]),
);

/** What `persisted-operations.json` holds: each operation's name, id and document, for clients. */
export function persistedOperationsManifest(): { name: string; id: string; document: string }[] {
  return STORED_OPERATIONS.map((o) => ({ name: o.name, id: operationId(o.document), document: o.document }));
}

/** Wraps a description into `# ` comment lines of at most 100 characters. */
function comment(text: string): string {
  const lines: string[] = [];
  let line = '#';
  for (const word of text.split(' ')) {
    if (line.length + word.length + 1 > 100) {
      lines.push(line);
      line = '#';
    }
    line += ` ${word}`;
  }
  return [...lines, line].join('\n');
}

const INTRODUCTION = `# Credits read API: the signed-in user's profile, the organization, the paged and searchable
# list of a parent's children, and the parent's credit analysis.
#
# Authenticate in the Headers tab below: {"Authorization": "Bearer <token>"}. In development it
# holds a demo parent's token already; \`npm run token -- --list\` lists the demo accounts and
# \`npm run token -- <email or userID>\` mints a token for one. \`organization\` also accepts
# {"X-Public-Key": "<the organization's public key>"}.`;

/** The document GraphiQL opens with. The run button offers the operation to send. */
export const GRAPHIQL_DEFAULT_DOCUMENT = `${INTRODUCTION}\n\n${STORED_OPERATIONS.map((o) => `${comment(o.description)}\n${o.document}`).join('\n\n')}\n`;

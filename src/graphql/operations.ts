/**
 * The document GraphiQL opens with: one named operation per root field, ready to run against the
 * demo data (a test executes each one). The run button offers the operation to send.
 */
export const GRAPHIQL_DEFAULT_DOCUMENT = `# Credits read API: the signed-in user's profile, the organization, the paged and searchable
# list of a parent's children, and the parent's credit analysis.
#
# Authenticate in the Headers tab below: {"Authorization": "Bearer <token>"}. In development it
# holds a demo parent's token already; \`npm run token -- --list\` lists the demo accounts and
# \`npm run token -- <email or userID>\` mints a token for one. \`organization\` also accepts
# {"X-Public-Key": "<the organization's public key>"}.

# The caller's own profile: a parent's carries the organization's credit and billing fields.
query Me {
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
}

# The organization's details (a child gets its parent's). Each answer counts as a retrieval.
query Organization {
  organization {
    organizationName
    organizationUrl
    authUrls { signin signup verify reset update resend successful }
    domainRestrictionEnabled
    emailVerificationRequired
    providerASsoConfig { enabled clientId }
    credentials { publicKey jwtSecret }
  }
}

# A parent's children, newest first, ten at a time: pass the last endCursor as $after for the
# next page. $search matches usernames and emails (case-insensitive).
query ChildAccounts($search: String, $after: String) {
  childAccounts(search: $search, limit: 10, after: $after) {
    edges { node { username email lastSeen registered } }
    pageInfo { hasNextPage endCursor }
    stats { total active }
  }
}

# A parent's credit analysis: balance, usage this month, billable users, projection, alerts and
# purchases.
query CreditAnalysis {
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
}
`;

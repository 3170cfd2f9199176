/*
 * Example answers (a test validates each against its schema). One organization throughout: its
 * parent, one child, one purchase.
 */
const PURCHASE = {
  packageType: 'STARTER',
  purchaseDate: 1706745600000,
  creditsAdded: 10000,
  freeUsersAdded: 1000,
  price: 10,
  transactionId: 'TXN_8f2c61d0',
};
const ACCOUNT = {
  userID: 'USR_7f3a9c',
  username: 'acme-admin',
  email: 'admin@acme.example.com',
  publicKey: 'APK_7f3a9c_1705312800000',
  parentAccount: 'ROOT',
  accountStatus: 'active',
  emailVerified: true,
  createdAt: 1705312800000,
  updatedAt: 1716200000000,
  lastLogin: 1716200000000,
  organizationName: 'Acme',
  domainRestrictionEnabled: true,
  emailVerificationRequired: false,
  organizationId: null,
  authProvider: 'email',
  lastLoginProvider: 'email',
  providerAId: null,
  childSignupCount: 120,
  signInCount: 3400,
  emailConfirmationCount: 118,
  providerAAuthCount: 40,
  providerBAuthCount: 12,
  providerCAuthCount: 0,
  providerDAuthCount: 3,
  lastPasswordChanged: null,
  loginAttempts: 0,
  lastLoginAttempt: 1716200000000,
  lockedUntil: null,
  lastResetPasswordRequestAt: null,
};
export const PROFILE_EXAMPLES = {
  parent: {
    success: true,
    data: {
      message: 'User profile retrieved successfully',
      user: {
        ...ACCOUNT,
        accountType: 'parent',
        organizationUrl: 'https://acme.example.com',
        authUrls: { signin: 'https://acme.example.com/signin', signup: 'https://acme.example.com/signup' },
        creditBalance: 8200,
        totalFreeUsers: 1000,
        billableChildAccounts: 0,
        totalChildAccounts: 120,
        packagesHistory: [PURCHASE],
        accountBalance: 0,
        availableBalance: 0,
        providerASsoConfig: { enabled: false, clientId: '' },
        lastLowCreditNotificationAt: null,
        lastCriticalCreditNotificationAt: null,
        lastDepletedCreditNotificationAt: null,
      },
    },
  },
  child: {
    success: true,
    data: {
      message: 'User profile retrieved successfully',
      user: {
        ...ACCOUNT,
        userID: 'USR_c41d02',
        username: 'jane',
        email: 'jane@example.org',
        parentAccount: 'APK_7f3a9c_1705312800000',
        signInCount: 31,
        childSignupCount: 0,
        emailConfirmationCount: 1,
        accountType: 'child',
        organizationUrl: null,
        authUrls: null,
      },
    },
  },
};
export const ORGANIZATION_EXAMPLE = {
  success: true,
  data: {
    message: 'Organization details retrieved successfully',
    organizationName: 'Acme',
    organizationUrl: 'https://acme.example.com',
    authUrls: Object.fromEntries(
      ['signin', 'signup', 'verify', 'reset', 'update', 'resend', 'successful'].map((key) => [
        key,
        `https://acme.example.com/${key}`,
      ]),
    ),
    domainRestrictionEnabled: true,
    emailVerificationRequired: false,
    providerASsoConfig: { enabled: false, clientId: '' },
    credentials: { publicKey: 'APK_7f3a9c_1705312800000', jwtSecret: '********' },
  },
};
export const CHILD_PAGE_EXAMPLE = {
  success: true,
  data: {
    data: {
      stats: { total: 120, active: 54 },
      accounts: [
        {
          username: 'jane',
          email: 'jane@example.org',
          lastSeen: '2024-05-20T10:13:20.000Z',
          registered: '2024-03-02T09:00:00.000Z',
        },
        { username: 'omar', email: 'omar@example.org', lastSeen: null, registered: '2024-02-27T16:45:10.000Z' },
      ],
      pagination: { limit: 2, hasMore: true, nextPageToken: 'eyJ2IjoxLCJjIjoxNzA5MDUyMzEwMDAwfQ.c2lnbmF0dXJl' },
    },
  },
};
export const CREDIT_ANALYSIS_EXAMPLE = {
  creditBalance: 8200,
  totalFreeUsers: 1000,
  totalChildAccounts: 1120,
  billableUsers: 120,
  monthlyRetentionCredits: 120,
  operationUsage: {
    childSignups: 40,
    signIns: 900,
    emailVerifications: 38,
    socialSignIns: { providerA: 20, providerB: 4, providerC: 0, providerD: 1, total: 25 },
  },
  totalCreditsUsed: 1251,
  projectedMonthlyUsage: 2061,
  alerts: { low: false, critical: false, depleted: false },
  packageHistory: [PURCHASE],
};

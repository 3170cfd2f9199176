import type { RequestContext } from '../context.js';
import { getProfile } from '../services/get-profile.js';
import { millis } from './http.js';

/** GET /auth/user-profile: `{ success, data: { message, user } }`, fields in the spec's order. */
export async function userProfile(context: RequestContext): Promise<unknown> {
  const profile = await getProfile(await context.jwtViewer(), context.services);
  const user: Record<string, unknown> = {
    userID: profile.userID,
    username: profile.username,
    email: profile.email,
    publicKey: profile.publicKey,
    accountType: profile.accountType,
    parentAccount: profile.parentAccount,
    accountStatus: profile.accountStatus,
    emailVerified: profile.emailVerified,
    createdAt: millis(profile.createdAt),
    updatedAt: millis(profile.updatedAt),
    lastLogin: millis(profile.lastLogin),
    organizationName: profile.organizationName,
    organizationUrl: profile.accountType === 'parent' ? profile.organizationUrl : null,
    authUrls: profile.accountType === 'parent' ? profile.authUrls : null,
    domainRestrictionEnabled: profile.domainRestrictionEnabled,
    emailVerificationRequired: profile.emailVerificationRequired,
    // decisions §1: always null, as in every sample of the original.
    organizationId: null,
    authProvider: profile.authProvider,
    lastLoginProvider: profile.lastLoginProvider,
    providerAId: profile.providerAId,
    childSignupCount: profile.childSignupCount,
    signInCount: profile.signInCount,
    emailConfirmationCount: profile.emailConfirmationCount,
    providerAAuthCount: profile.providerAAuthCount,
    providerBAuthCount: profile.providerBAuthCount,
    providerCAuthCount: profile.providerCAuthCount,
    providerDAuthCount: profile.providerDAuthCount,
    lastPasswordChanged: millis(profile.lastPasswordChanged),
    loginAttempts: profile.loginAttempts,
    lastLoginAttempt: millis(profile.lastLoginAttempt),
    lockedUntil: millis(profile.lockedUntil),
    lastResetPasswordRequestAt: millis(profile.lastResetPasswordRequestAt),
  };
  if (profile.accountType === 'parent') {
    const [totalChildAccounts, billableChildAccounts, packagesHistory] = await Promise.all([
      profile.totalChildAccounts(),
      profile.billableChildAccounts(),
      profile.packagesHistory(),
    ]);
    Object.assign(user, {
      creditBalance: profile.creditBalance,
      totalFreeUsers: profile.totalFreeUsers,
      billableChildAccounts,
      totalChildAccounts,
      packagesHistory: packagesHistory.map((p) => ({ ...p, purchaseDate: millis(p.purchaseDate) })),
      accountBalance: profile.accountBalance,
      availableBalance: profile.availableBalance,
      providerASsoConfig: profile.providerASsoConfig,
      lastLowCreditNotificationAt: millis(profile.lastLowCreditNotificationAt),
      lastCriticalCreditNotificationAt: millis(profile.lastCriticalCreditNotificationAt),
      lastDepletedCreditNotificationAt: millis(profile.lastDepletedCreditNotificationAt),
    });
  }
  return { success: true, data: { message: 'User profile retrieved successfully', user } };
}

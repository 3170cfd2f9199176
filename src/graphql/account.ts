import type { PackagePurchase as PackagePurchaseValue } from '../domain/credit-analysis.js';
import { getProfile, type ChildProfile, type ParentProfile, type Profile } from '../services/get-profile.js';
import { Node } from './node-interface.js';
import { builder, viewerOf } from './builder.js';
import { DateTime } from './scalars.js';
import { PACKAGES, type PackageType as PackageTypeValue } from '../domain/catalogue.js';

/** From the catalogue, so the schema cannot disagree with it: `$50, 55,000 credits (10 % bonus), 5,000 free users.` */
function packageDescription(type: PackageTypeValue): string {
  const { priceCents, credits, freeUsers, bonusPercent } = PACKAGES[type];
  const bonus = bonusPercent > 0 ? ` (${bonusPercent} % bonus)` : '';
  return `$${priceCents / 100}, ${credits.toLocaleString('en-US')} credits${bonus}, ${freeUsers.toLocaleString('en-US')} free users.`;
}

export const AccountType = builder.enumType('AccountType', {
  description: "Whether an account is an organization's parent account or one of its end users.",
  values: {
    parent: { description: 'The account that owns the organization.' },
    child: { description: 'An end user of the organization.' },
  },
});

export const AccountStatus = builder.enumType('AccountStatus', {
  description: 'The state of an account.',
  values: {
    active: { description: 'Normal.' },
    inactive: { description: 'Not active; requests authenticated as it are refused with ACCOUNT_INACTIVE.' },
    locked: { description: 'Locked until lockedUntil; usable again once the lock has expired.' },
  },
});

export const AuthProvider = builder.enumType('AuthProvider', {
  description: 'A sign-in method: email and password, or one of the external identity providers.',
  values: {
    email: { description: 'Email address and password.' },
    providerA: { description: 'External identity provider A (the one single sign-on can be configured for).' },
    providerB: { description: 'External identity provider B.' },
    providerC: { description: 'External identity provider C.' },
    providerD: { description: 'External identity provider D.' },
  },
});

export const PackageType = builder.enumType('PackageType', {
  description: 'A credit package that an organization buys.',
  values: {
    STARTER: { description: packageDescription('STARTER') },
    GROWTH: { description: packageDescription('GROWTH') },
    SCALE: { description: packageDescription('SCALE') },
  },
});

export const PackagePurchase = builder.objectRef<PackagePurchaseValue>('PackagePurchase').implement({
  description: 'One credit package bought by the organization.',
  fields: (t) => ({
    packageType: t.field({ type: PackageType, description: 'The package bought.', resolve: (p) => p.packageType }),
    purchaseDate: t.field({ type: DateTime, description: 'When it was bought.', resolve: (p) => p.purchaseDate }),
    creditsAdded: t.exposeInt('creditsAdded', { description: 'Credits the purchase added.' }),
    freeUsersAdded: t.exposeInt('freeUsersAdded', { description: 'Free users the purchase added to the quota.' }),
    price: t.exposeFloat('price', { description: 'Price paid, in dollars.' }),
    transactionId: t.exposeString('transactionId', { description: 'Payment transaction reference.' }),
  }),
});

export const ProviderASsoConfig = builder
  .objectRef<{ enabled: boolean; clientId: string }>('ProviderASsoConfig')
  .implement({
    description: 'Single sign-on with providerA (the first OAuth provider).',
    fields: (t) => ({
      enabled: t.exposeBoolean('enabled', { description: 'Whether providerA SSO is enabled.' }),
      clientId: t.exposeString('clientId', { description: 'The OAuth client id registered with providerA.' }),
    }),
  });

export const ProfileAuthUrls = builder.objectRef<{ signin: string; signup: string }>('ProfileAuthUrls').implement({
  description: "URLs of the organization's sign-in and sign-up pages.",
  fields: (t) => ({
    signin: t.exposeString('signin', { description: 'The sign-in page.' }),
    signup: t.exposeString('signup', { description: 'The sign-up page.' }),
  }),
});

const timestamp = (description: string) => ({ type: DateTime, description });

export const Account = builder.interfaceRef<Profile>('Account').implement({
  description: 'The signed-in account: a parent (ParentAccount) or a child (ChildAccount).',
  interfaces: [Node],
  resolveType: (profile) => (profile.accountType === 'parent' ? 'ParentAccount' : 'ChildAccount'),
  fields: (t) => ({
    userID: t.exposeID('userID', { description: 'The user id, shape USR_<id>.' }),
    username: t.exposeString('username', { description: 'The username.' }),
    email: t.exposeString('email', { description: 'The email address.' }),
    publicKey: t.exposeString('publicKey', { description: "The account's public key, shape APK_<id>_<digits>." }),
    accountType: t.field({ type: AccountType, description: '`parent` or `child`.', resolve: (p) => p.accountType }),
    parentAccount: t.exposeString('parentAccount', {
      description: "`ROOT` for a parent; the parent's publicKey for a child.",
    }),
    accountStatus: t.field({
      type: AccountStatus,
      description: '`active`, `inactive` or `locked`.',
      resolve: (p) => p.accountStatus,
    }),
    emailVerified: t.exposeBoolean('emailVerified', { description: 'Whether the email address is verified.' }),
    createdAt: t.field({ ...timestamp('Account creation time.'), resolve: (p) => p.createdAt }),
    updatedAt: t.field({ ...timestamp('Last update time.'), resolve: (p) => p.updatedAt }),
    lastLogin: t.field({
      ...timestamp('Last login time; null when the account never logged in.'),
      nullable: true,
      resolve: (p) => p.lastLogin,
    }),
    organizationName: t.exposeString('organizationName', { description: 'The organization display name.' }),
    domainRestrictionEnabled: t.exposeBoolean('domainRestrictionEnabled', {
      description: "Whether the sign-in widget is restricted to the organization's domain.",
    }),
    emailVerificationRequired: t.exposeBoolean('emailVerificationRequired', {
      description: 'Whether email verification is required.',
    }),
    authProvider: t.field({
      type: AuthProvider,
      description: 'The primary sign-in method: `email` or `providerA`.',
      resolve: (p) => p.authProvider as 'email',
    }),
    lastLoginProvider: t.field({
      type: AuthProvider,
      nullable: true,
      description: 'The sign-in method used last.',
      resolve: (p) => p.lastLoginProvider as 'email' | null,
    }),
    providerAId: t.exposeString('providerAId', { nullable: true, description: 'The linked providerA account id.' }),
    childSignupCount: t.exposeInt('childSignupCount', {
      description: 'Child signups (5 credits each). A parent counts its whole organization, a child only itself.',
    }),
    signInCount: t.exposeInt('signInCount', { description: 'Sign-in attempts (1 credit each).' }),
    emailConfirmationCount: t.exposeInt('emailConfirmationCount', {
      description: 'Email confirmations (2 credits each).',
    }),
    providerAAuthCount: t.exposeInt('providerAAuthCount', {
      description: 'providerA OAuth authentications (3 credits each).',
    }),
    providerBAuthCount: t.exposeInt('providerBAuthCount', {
      description: 'providerB OAuth authentications (3 credits each).',
    }),
    providerCAuthCount: t.exposeInt('providerCAuthCount', {
      description: 'providerC OAuth authentications (3 credits each).',
    }),
    providerDAuthCount: t.exposeInt('providerDAuthCount', {
      description: 'providerD OAuth authentications (3 credits each).',
    }),
    lastPasswordChanged: t.field({
      ...timestamp('Last password change.'),
      nullable: true,
      resolve: (p) => p.lastPasswordChanged,
    }),
    loginAttempts: t.exposeInt('loginAttempts', { description: 'Failed login attempts counter.' }),
    lastLoginAttempt: t.field({
      ...timestamp('Last login attempt.'),
      nullable: true,
      resolve: (p) => p.lastLoginAttempt,
    }),
    lockedUntil: t.field({ ...timestamp('When the lock expires.'), nullable: true, resolve: (p) => p.lockedUntil }),
    lastResetPasswordRequestAt: t.field({
      ...timestamp('Last password reset request.'),
      nullable: true,
      resolve: (p) => p.lastResetPasswordRequestAt,
    }),
  }),
});

export const ChildAccount = builder.objectRef<ChildProfile>('ChildAccount').implement({
  description:
    "A child account's own profile: no credit, billing or SSO fields; its counters count only its own activity.",
  interfaces: [Account, Node],
  isTypeOf: (value) => (value as Profile).accountType === 'child',
});

export const ParentAccount = builder.objectRef<ParentProfile>('ParentAccount').implement({
  description: "A parent account's profile, with the organization's credit, billing and SSO fields.",
  interfaces: [Account, Node],
  isTypeOf: (value) => (value as Profile).accountType === 'parent',
  fields: (t) => ({
    organizationUrl: t.exposeString('organizationUrl', { description: 'Base URL of the organization.' }),
    authUrls: t.field({
      type: ProfileAuthUrls,
      description: 'URLs of the sign-in and sign-up pages.',
      resolve: (p) => p.authUrls,
    }),
    creditBalance: t.exposeInt('creditBalance', { description: 'Available credits.' }),
    totalFreeUsers: t.exposeInt('totalFreeUsers', { description: 'Cumulative free-user quota from packages.' }),
    billableChildAccounts: t.int({
      description: 'Children above the free-user quota: max(0, totalChildAccounts - totalFreeUsers).',
      resolve: (p) => p.billableChildAccounts(),
    }),
    totalChildAccounts: t.int({
      description: 'Number of child accounts, any status.',
      resolve: (p) => p.totalChildAccounts(),
    }),
    packagesHistory: t.field({
      type: [PackagePurchase],
      description: 'Package purchases, newest first.',
      resolve: (p) => p.packagesHistory(),
    }),
    accountBalance: t.exposeFloat('accountBalance', {
      description: 'Legacy dollar balance, kept for backward compatibility.',
    }),
    availableBalance: t.exposeFloat('availableBalance', {
      description: 'Legacy available balance, kept for backward compatibility.',
    }),
    providerASsoConfig: t.field({
      type: ProviderASsoConfig,
      description: 'The providerA SSO configuration.',
      resolve: (p) => p.providerASsoConfig,
    }),
    lastLowCreditNotificationAt: t.field({
      ...timestamp('When the low-credit (20 %) notification was last sent.'),
      nullable: true,
      resolve: (p) => p.lastLowCreditNotificationAt,
    }),
    lastCriticalCreditNotificationAt: t.field({
      ...timestamp('When the critical-credit (10 %) notification was last sent.'),
      nullable: true,
      resolve: (p) => p.lastCriticalCreditNotificationAt,
    }),
    lastDepletedCreditNotificationAt: t.field({
      ...timestamp('When the credits-depleted notification was last sent.'),
      nullable: true,
      resolve: (p) => p.lastDepletedCreditNotificationAt,
    }),
  }),
});

builder.queryField('me', (t) =>
  t.field({
    type: Account,
    description:
      "The authenticated user's own profile (JWT). A parent's includes the organization's credit, billing and SSO fields.",
    authScopes: { authenticated: true },
    resolve: async (_root, _args, context) => getProfile(await viewerOf(context, 'jwt'), context.services),
  }),
);

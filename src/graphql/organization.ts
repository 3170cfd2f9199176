import {
  MASKED_SECRET,
  getOrganizationDetails,
  type OrganizationDetails,
} from '../services/get-organization-details.js';
import { ProviderASsoConfig } from './account.js';
import { builder, viewerOf } from './builder.js';
import { Node } from './node-interface.js';

const OrganizationAuthUrls = builder.objectRef<OrganizationDetails['authUrls']>('OrganizationAuthUrls').implement({
  description: "Absolute URLs of the organization's authentication pages.",
  fields: (t) => ({
    signin: t.exposeString('signin', { description: 'The sign-in page.' }),
    signup: t.exposeString('signup', { description: 'The sign-up page.' }),
    verify: t.exposeString('verify', { description: 'The email verification page.' }),
    reset: t.exposeString('reset', { description: 'The password reset page.' }),
    update: t.exposeString('update', { description: 'The password update page.' }),
    resend: t.exposeString('resend', { description: 'The page that resends the verification email.' }),
    successful: t.exposeString('successful', { description: 'The page shown after a successful sign-in.' }),
  }),
});

const Credentials = builder.objectRef<OrganizationDetails['credentials']>('Credentials').implement({
  description: "The organization's API credentials.",
  fields: (t) => ({
    publicKey: t.exposeString('publicKey', { description: "The organization's public key (the parent's publicKey)." }),
    jwtSecret: t.string({
      description: `The token-signing secret. Only the parent itself, authenticated by JWT, sees it; every other caller gets "${MASKED_SECRET}".`,
      authScopes: { parentViaJwt: true },
      unauthorizedResolver: () => MASKED_SECRET,
      resolve: (credentials) => credentials.jwtSecret,
    }),
  }),
});

// What an Organization shows depends on the organization and on whether the caller is its parent
// by JWT (the secret), nothing else: an answer that shows it alone is held once for all of the
// organization's other readers (`showsOrganizationOnly`, `RequestContext.sharedAnswer`).
// A field that would show something of the caller must change that rule first.
export const Organization = builder.objectRef<OrganizationDetails>('Organization').implement({
  description: "The organization's settings and credentials.",
  interfaces: [Node],
  isTypeOf: (value) => typeof value === 'object' && value !== null && 'organizationName' in value,
  fields: (t) => ({
    organizationName: t.exposeString('organizationName', { description: 'The organization display name.' }),
    organizationUrl: t.exposeString('organizationUrl', { description: 'Base URL of the organization.' }),
    authUrls: t.field({
      type: OrganizationAuthUrls,
      description: 'URLs of the authentication pages.',
      resolve: (o) => o.authUrls,
    }),
    domainRestrictionEnabled: t.exposeBoolean('domainRestrictionEnabled', {
      description: "Whether the sign-in widget is restricted to the organization's domain (default true).",
    }),
    emailVerificationRequired: t.exposeBoolean('emailVerificationRequired', {
      description: 'Whether email verification is required (default false).',
    }),
    providerASsoConfig: t.field({
      type: ProviderASsoConfig,
      description: 'The providerA SSO configuration.',
      resolve: (o) => o.providerASsoConfig,
    }),
    credentials: t.field({ type: Credentials, description: 'The API credentials.', resolve: (o) => o.credentials }),
  }),
});

builder.queryField('organization', (t) =>
  t.field({
    type: Organization,
    description:
      "The organization's details, by JWT or by the X-Public-Key header (JWT preferred). A child gets its parent's organization. Each answer counts as a retrieval.",
    authScopes: { organizationReader: true },
    resolve: async (_root, _args, context) =>
      getOrganizationDetails(await viewerOf(context, 'organization'), context.services),
  }),
);

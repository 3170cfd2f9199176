import type { Viewer } from '../auth/authenticate.js';
import { isParentByJwt } from '../auth/authorize.js';
import type { ServiceContext } from './context.js';

/** decisions §3: the value every caller but the parent itself (by JWT) sees instead of the secret. */
export const MASKED_SECRET = '********';

export type OrganizationDetails = {
  organizationName: string;
  organizationUrl: string;
  authUrls: {
    signin: string;
    signup: string;
    verify: string;
    reset: string;
    update: string;
    resend: string;
    successful: string;
  };
  domainRestrictionEnabled: boolean;
  emailVerificationRequired: boolean;
  providerASsoConfig: { enabled: boolean; clientId: string };
  credentials: { publicKey: string; jwtSecret: string };
};

/** The organization's details (spec: GET /auth/organization-details); counts the retrieval. */
/** The public key of the viewer's organization (its parent's). */
export async function organizationPublicKey(viewer: Viewer, context: ServiceContext): Promise<string | null> {
  const { organization } = viewer;
  return viewer.account.id === organization.parentId
    ? viewer.account.publicKey
    : context.loaders.publicKeyByAccountId.load(organization.parentId);
}

export async function getOrganizationDetails(viewer: Viewer, context: ServiceContext): Promise<OrganizationDetails> {
  const { organization } = viewer;
  const parentKey = await organizationPublicKey(viewer, context);
  const details: OrganizationDetails = {
    organizationName: organization.name,
    organizationUrl: organization.url,
    authUrls: {
      signin: organization.signinUrl,
      signup: organization.signupUrl,
      verify: organization.verifyUrl,
      reset: organization.resetUrl,
      update: organization.updateUrl,
      resend: organization.resendUrl,
      successful: organization.successfulUrl,
    },
    domainRestrictionEnabled: organization.domainRestrictionEnabled,
    emailVerificationRequired: organization.emailVerificationRequired,
    providerASsoConfig: { enabled: organization.providerASsoEnabled, clientId: organization.providerASsoClientId },
    credentials: {
      publicKey: parentKey ?? '',
      jwtSecret: isParentByJwt(viewer) ? organization.jwtSecret : MASKED_SECRET,
    },
  };
  context.retrievals.record(organization.parentId);
  return details;
}

import { decodeProtectedHeader, errors as joseErrors, type JWTVerifyOptions } from 'jose';
import {
  AccountInactiveError,
  CreditsDepletedError,
  InvalidParentAccountError,
  MissingParentPublicKeyError,
  UnauthorizedError,
  UserNotFoundError,
} from '../errors.js';
import type { CacheReader } from '../db/entity-cache.js';
import { verifiedOnce, type TokenMemo, type VerifiedToken } from '../db/verified-tokens.js';
import type { AccountRow } from '../db/accounts.js';
import type { Loaders, OrganizationSettings } from '../db/loaders.js';
import { bearerToken, isCanonicalJws } from './credentials.js';
import { TOKEN_ALGORITHM } from './tokens.js';
import { verifyHs256 } from './hs256.js';

export type Viewer = {
  kind: 'parent' | 'child' | 'publicKey';
  /** The authenticated account; for a public-key caller, the parent that owns the key. */
  account: AccountRow;
  /** Without its balances (see `balancesByParentId` for those). */
  organization: OrganizationSettings;
  via: 'jwt' | 'publicKey';
};

/** What the caller sent, transport-neutral. */
export type Credentials = {
  authorization?: string | null;
  publicKey?: string | null;
  /** The connection's memory of its last token's cache key, when it has one (see `TokenMemo`). */
  memo?: TokenMemo;
};

export type { TokenMemo };

export type AuthDependencies = {
  loaders: Loaders;
  /** Remembers verified tokens (dropped with their organization's key). */
  cache: CacheReader;
  jwt: {
    issuer?: string;
    audience?: string;
    maxAgeSeconds?: number;
    /** Longest `exp - iat` accepted. */
    maxLifetimeSeconds: number;
    /** Longest token accepted, in characters. */
    maxTokenBytes: number;
  };
  now: () => Date;
};

/** decisions §1: public keys are APK_<alphanumerics>_<digits>. */
export const PUBLIC_KEY_PATTERN = /^APK_[A-Za-z0-9]+_[0-9]+$/;
const MAX_PUBLIC_KEY_LENGTH = 128;
const CLOCK_TOLERANCE_SECONDS = 5;

function isPublicKey(value: string): boolean {
  return value.length <= MAX_PUBLIC_KEY_LENGTH && PUBLIC_KEY_PATTERN.test(value);
}

/** decisions §2: active, or locked with the lock already expired. */
export function isUsable(account: Pick<AccountRow, 'status' | 'lockedUntil'>, now: Date): boolean {
  if (account.status === 'active') return true;
  return account.status === 'locked' && account.lockedUntil !== null && account.lockedUntil < now;
}

/** The time rules of `verifyToken`, for a remembered token (same tolerance, same messages). */
function checkTimes(token: VerifiedToken, now: Date, maxAgeSeconds: number | undefined): void {
  const seconds = now.getTime() / 1000;
  // Too old for the maximum age counts as expired, as jose reports it on a token's first check.
  const old = maxAgeSeconds !== undefined && seconds - token.iat - CLOCK_TOLERANCE_SECONDS > maxAgeSeconds;
  if (token.exp <= seconds - CLOCK_TOLERANCE_SECONDS || old)
    throw new UnauthorizedError('The access token has expired.');
  const early =
    token.iat > seconds + CLOCK_TOLERANCE_SECONDS ||
    (token.nbf !== undefined && token.nbf > seconds + CLOCK_TOLERANCE_SECONDS);
  if (early) throw new UnauthorizedError('The access token is invalid.');
}

/** Full verification with jose, and the tags of the key it was checked with. */
async function verifyToken(
  token: string,
  deps: AuthDependencies,
  now: Date,
): Promise<{ verified: VerifiedToken; tags: readonly string[] }> {
  if (!isCanonicalJws(token)) throw new UnauthorizedError('The access token is malformed.');
  let header: Record<string, unknown>;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    throw new UnauthorizedError('The access token is malformed.');
  }
  const { kid } = header;
  if (typeof kid !== 'string' || !isPublicKey(kid)) {
    throw new UnauthorizedError('The access token does not name a valid key.');
  }
  const key = await deps.loaders.signingKeyByPublicKey.load(kid);
  if (!key) throw new UnauthorizedError('The access token is invalid.');

  const options: JWTVerifyOptions = {
    algorithms: [TOKEN_ALGORITHM],
    requiredClaims: ['exp', 'iat', 'sub'],
    clockTolerance: CLOCK_TOLERANCE_SECONDS,
    currentDate: now,
    ...(deps.jwt.issuer ? { issuer: deps.jwt.issuer } : {}),
    ...(deps.jwt.audience ? { audience: deps.jwt.audience } : {}),
    ...(deps.jwt.maxAgeSeconds ? { maxTokenAge: deps.jwt.maxAgeSeconds } : {}),
  };
  let verified: VerifiedToken;
  try {
    // jose's verdict; the signature by node:crypto for the plain HS256 tokens the API issues (the
    // token was found canonical and its header decoded above).
    const payload = await verifyHs256(token, key, options, header);
    // No account's id holds a NUL (PostgreSQL's text cannot): such a sub names no one, and is not looked up.
    if (typeof payload.sub !== 'string' || payload.sub.length === 0 || payload.sub.includes('\0'))
      throw new UnauthorizedError();
    if (typeof payload.iat !== 'number' || typeof payload.exp !== 'number') throw new UnauthorizedError();
    // A token may not outlive the configured lifetime, whatever its exp says.
    if (!(payload.exp - payload.iat <= deps.jwt.maxLifetimeSeconds)) throw new UnauthorizedError();
    verified = { subject: payload.sub, parentId: key.parentId, exp: payload.exp, iat: payload.iat, nbf: payload.nbf };
    // A token issued in the future was not issued by a correct clock: refused like an early nbf.
    checkTimes(verified, now, deps.jwt.maxAgeSeconds);
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) throw new UnauthorizedError('The access token has expired.');
    throw new UnauthorizedError('The access token is invalid.');
  }
  return { verified, tags: key.tokenTags };
}

/**
 * A JWT caller (decisions §2): HS256 with the secret of the organization `kid` names; type and status from the
 * database.
 */
export async function authenticateJwt(credentials: Credentials, deps: AuthDependencies): Promise<Viewer> {
  if (credentials.authorization === undefined || credentials.authorization === null) {
    throw new UnauthorizedError('An access token is required (Authorization: Bearer <token>).');
  }
  const token = bearerToken(credentials.authorization, deps.jwt.maxTokenBytes);
  const now = deps.now();
  // A verified token is verified again only when its organization's key changes; its time claims are
  // checked on every use.
  const verified = await verifiedOnce(deps.cache, token, credentials.memo, () => verifyToken(token, deps, now));
  checkTimes(verified, now, deps.jwt.maxAgeSeconds);

  const account = await deps.loaders.accountById.load(verified.subject);
  if (!account) throw new UserNotFoundError('The account of this token no longer exists.');
  const organizationId = account.parentId ?? account.id;
  // A token signed with one organization's secret must not speak for another organization's account.
  if (organizationId !== verified.parentId) throw new UnauthorizedError('The access token is invalid.');
  const organization = await deps.loaders.organizationSettingsByParentId.load(organizationId);
  if (!organization) throw new UserNotFoundError('The account of this token no longer exists.');
  if (!isUsable(account, now)) throw new AccountInactiveError();
  if (account.type === 'child' && !organization.funded) throw new CreditsDepletedError();
  return { kind: account.type, account, organization, via: 'jwt' };
}

/** Organization details (decisions §3): the JWT when an Authorization header is sent, else the X-Public-Key. */
export async function authenticateForOrganization(credentials: Credentials, deps: AuthDependencies): Promise<Viewer> {
  if (credentials.authorization !== undefined && credentials.authorization !== null) {
    return authenticateJwt(credentials, deps);
  }
  const publicKey = credentials.publicKey?.trim();
  if (publicKey === undefined || publicKey === '') throw new MissingParentPublicKeyError();
  if (!isPublicKey(publicKey)) throw new InvalidParentAccountError('X-Public-Key is not a valid public key.');
  const account = await deps.loaders.accountByPublicKey.load(publicKey);
  if (!account) throw new UserNotFoundError('No account has this public key.');
  if (account.type !== 'parent') throw new InvalidParentAccountError("The public key is not a parent account's.");
  if (!isUsable(account, deps.now())) throw new InvalidParentAccountError('The parent account is not active.');
  const organization = await deps.loaders.organizationSettingsByParentId.load(account.id);
  if (!organization) throw new InvalidParentAccountError();
  return { kind: 'publicKey', account, organization, via: 'publicKey' };
}

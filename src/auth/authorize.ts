import { UnauthorizedAccessError } from '../errors.js';
import type { Viewer } from './authenticate.js';

/**
 * The parent itself, signed in by JWT: the only caller of the parent-only operations and the
 * only one that sees the signing secret (spec Authentication rule 1, decisions §3).
 */
export function isParentByJwt(viewer: Viewer): boolean {
  return viewer.kind === 'parent' && viewer.via === 'jwt';
}

/** Parent-only operations: any other caller gets UNAUTHORIZED_ACCESS. */
export function requireParent(viewer: Viewer): Viewer {
  if (!isParentByJwt(viewer)) throw new UnauthorizedAccessError();
  return viewer;
}

import { UnauthorizedAccessError } from '../errors.js';
import type { Viewer } from './authenticate.js';

/**
 * The parent itself, signed in by JWT: the only caller of the parent-only operations and the
 * only one that sees the signing secret (spec Authentication rule 1, decisions §3).
 */
export function isParentByJwt(viewer: Viewer): boolean {
  return viewer.kind === 'parent' && viewer.via === 'jwt';
}

declare const provedParent: unique symbol;

/**
 * A viewer proved to be the parent itself, by JWT: made only by `requireParent`, and the only
 * viewer the parent-only services take, so that a transport that forgets the check does not compile.
 */
export type ParentViewer = Viewer & { kind: 'parent'; via: 'jwt'; readonly [provedParent]: true };

/** Parent-only operations: any other caller gets UNAUTHORIZED_ACCESS. */
export function requireParent(viewer: Viewer): ParentViewer {
  if (!isParentByJwt(viewer)) throw new UnauthorizedAccessError();
  return viewer as ParentViewer;
}

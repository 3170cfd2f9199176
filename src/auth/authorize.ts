import { UnauthorizedAccessError } from '../errors.js';
import type { Viewer } from './authenticate.js';

/** Parent-only operations (spec, Authentication rule 1): any other caller gets UNAUTHORIZED_ACCESS. */
export function requireParent(viewer: Viewer): Viewer {
  if (viewer.kind !== 'parent' || viewer.via !== 'jwt') throw new UnauthorizedAccessError();
  return viewer;
}

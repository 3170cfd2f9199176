import { UnauthorizedAccessError } from '../errors.js';
import type { Viewer } from './authenticate.js';

/** The parent by JWT: the only caller of the parent-only operations and shown the signing secret (decisions §3). */
export function isParentByJwt(viewer: Viewer): boolean {
  return viewer.kind === 'parent' && viewer.via === 'jwt';
}

declare const provedParent: unique symbol;

/** A viewer proved to be the parent by JWT, made only by `requireParent`: a forgotten check does not compile. */
export type ParentViewer = Viewer & { kind: 'parent'; via: 'jwt'; readonly [provedParent]: true };

/** Parent-only operations: any other caller gets UNAUTHORIZED_ACCESS. */
export function requireParent(viewer: Viewer): ParentViewer {
  if (!isParentByJwt(viewer)) throw new UnauthorizedAccessError();
  return viewer as ParentViewer;
}

/** The detectors of the organizations' secrets, made once while the settings stay cached. */
const detectors = new WeakMap<Viewer['organization'], (payload: string | Buffer) => boolean>();

/** Whether a payload holds the signing secret (as sent, or JSON-escaped), for the one viewer shown it. */
export function secretShownTo(viewer: Viewer): ((payload: string | Buffer) => boolean) | undefined {
  const { organization } = viewer;
  if (!isParentByJwt(viewer) || !organization.jwtSecret) return undefined;
  let detector = detectors.get(organization);
  if (detector === undefined) detectors.set(organization, (detector = secretDetector(organization.jwtSecret)));
  return detector;
}

function secretDetector(secret: string): (payload: string | Buffer) => boolean {
  const forms = [...new Set([secret, JSON.stringify(secret).slice(1, -1)])];
  // Not Buffer.from: a small one is a slice of an 8 KB pool, which it keeps alive for as long as
  // the detector lives (a cached organization's, an open stream's).
  const bytes = forms.map((form) => Buffer.alloc(Buffer.byteLength(form), form));
  return (payload) =>
    typeof payload === 'string'
      ? forms.some((form) => payload.includes(form))
      : bytes.some((form) => payload.includes(form));
}

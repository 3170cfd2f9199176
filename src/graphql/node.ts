import { getOrganizationDetails, organizationPublicKey } from '../services/get-organization-details.js';
import { getProfile } from '../services/get-profile.js';
import { builder } from './builder.js';
import { Node, parseGlobalId } from './node-interface.js';

builder.queryField('node', (t) =>
  t.field({
    type: Node,
    nullable: true,
    description:
      "An object by its global id, as clients refetch it: the caller's own account (JWT) or its organization (JWT or X-Public-Key; an answer counts as a retrieval). Null for any other id.",
    args: { id: t.arg.id({ required: true, description: 'A global id from an `id` field.' }) },
    authScopes: { organizationReader: true },
    resolve: async (_root, args, context) => {
      const parsed = parseGlobalId(String(args.id));
      if (!parsed) return null;
      const viewer = await context.organizationViewer();
      if (parsed.kind === 'Account') {
        if (viewer.via !== 'jwt' || viewer.account.id !== parsed.key) return null;
        return (await getProfile(viewer, context.services)) as never;
      }
      if (parsed.key !== (await organizationPublicKey(viewer, context.services))) return null;
      return (await getOrganizationDetails(viewer, context.services)) as never;
    },
  }),
);

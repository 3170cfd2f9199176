import type { RequestContext } from '../context.js';
import { getOrganizationDetails } from '../services/get-organization-details.js';

/** GET /auth/organization-details: JWT, or X-Public-Key when no Authorization header is sent. */
export async function organizationDetails(context: RequestContext): Promise<unknown> {
  const details = await getOrganizationDetails(await context.organizationViewer(), context.services);
  return {
    success: true,
    data: { message: 'Organization details retrieved successfully', ...details },
  };
}

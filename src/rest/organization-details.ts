import type { RequestContext } from '../context.js';
import { getOrganizationDetails } from '../services/get-organization-details.js';

/**
 * GET /auth/organization-details: JWT, or X-Public-Key when no Authorization header is sent. Its
 * answer is held once for the organization's readers (`sharedByOrganization` in `http/app.ts`): it
 * shows nothing of the caller but whether it is the parent by JWT.
 */
export async function organizationDetails(context: RequestContext): Promise<unknown> {
  const details = await getOrganizationDetails(await context.organizationViewer(), context.services);
  return {
    success: true,
    data: { message: 'Organization details retrieved successfully', ...details },
  };
}

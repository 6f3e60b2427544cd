import { z } from 'zod';

/** Shapes shared by several route modules (MAPS DTO names). */
export const StatusResponse = z.object({ status: z.string() }).meta({ id: 'StatusResponse' });
export const RequestedAction = z.object({ state: z.string().trim().min(1, 'state is required') }).meta({ id: 'RequestedAction' });
export const FilterQuery = z.object({ filter: z.string().optional().describe('JMS / SQL-92 selector, e.g. level >= 30000') });
export const ErrorResponses = { 400: StatusResponse, 401: StatusResponse, 403: StatusResponse, 404: StatusResponse } as const;

import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { devicesOf } from '../../../devices/devices.service.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses, StatusResponse } from '../../schemas.js';

/**
 * HardwareManagementApi (reference #60–61): the known I²C devices and a scan of the configured buses. Unlike MAPS
 * (reference §14: scan results are cached for the cache lifetime), every scan request really scans the buses, and
 * the device list is built from the live actors on every request (their state changes from second to second).
 * Without a device manager or buses both answer an empty list, as MAPS does.
 */
const DeviceInfoDTO = z
  .object({
    name: z.string().describe('device name (configured, or <driver>-<bus>-<address> when found by a scan)'),
    description: z.string().describe('chip, bus and address'),
    type: z.string().describe('device type: SENSOR'),
    state: z.string().describe('Detected, Online, Polling, Error (backing off) or Offline'),
  })
  .meta({ id: 'DeviceInfoDTO' });

const tags = ['Hardware Management'];

export const hardwareRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  app.get(
    '/api/v1/server/hardware',
    {
      config: { permission: { permission: 'view_stats' } },
      schema: { tags, summary: 'Get known devices', response: { 200: z.array(DeviceInfoDTO), ...ErrorResponses } },
    },
    async () => devicesOf(ctx.rt)?.list() ?? [],
  );

  app.post(
    '/api/v1/server/hardware/scan',
    {
      config: { permission: { permission: 'manage_interfaces' } },
      schema: {
        tags,
        summary: 'Scan for new hardware',
        description:
          'Scans every configured I²C bus now (never a cached answer) and answers the names of the devices found. 409 when no configured bus could be opened.',
        response: { 200: z.array(z.string()), ...ErrorResponses, 409: StatusResponse },
      },
    },
    async () => (await devicesOf(ctx.rt)?.scan()) ?? [],
  );
};

import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { loraOf } from '../../../devices/lora/lora.service.js';
import { NotFoundError, ValidationError } from '../../../errors.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses } from '../../schemas.js';

/**
 * LoRaDeviceApi (reference #62–64): the configured LoRa radios, the nodes heard on each, and a node's connection
 * counters, built from live state on every request (MAPS does not cache them either). Registered with interface
 * management, as in MAPS. `radio` is "Serial" for a modem on a serial port (as MAPS); `state`, `module`, `port` and
 * `lastError` are additions.
 */
const LoRaEndPointInfoDTO = z
  .object({
    nodeId: z.number().int().describe('node id heard on this radio'),
    lastRSSI: z.number().int().describe('RSSI of the last packet from the node, dBm (0: the modem firmware cannot say)'),
    incomingQueueSize: z.number().int().describe('messages queued for transmission to the node (its downlink queue)'),
    connectionSize: z.number().int().describe('1 for a node heard'),
    lastRead: z.number().int().describe('epoch ms of the last packet from the node'),
    lastWrite: z.number().int().describe('epoch ms of the last packet sent to the node (0: none)'),
  })
  .meta({ id: 'LoRaEndPointInfoDTO' });

const LoRaDeviceInfoDTO = z
  .object({
    name: z.string(),
    radio: z.string().describe('"Serial": a LoRa modem on a serial port'),
    bytesSent: z.number().int(),
    bytesReceived: z.number().int(),
    packetsSent: z.number().int(),
    packetsReceived: z.number().int(),
    endPointInfoList: z.array(LoRaEndPointInfoDTO),
    state: z.string().describe('Opening, Online, Offline (modem lost, reopening with backoff) or Failed (not opened yet, retrying with backoff)'),
    module: z.string().describe('what the modem answered to sys get ver (empty until first opened)'),
    port: z.string().describe('serial port'),
    lastError: z.string().optional().describe('why the radio is Offline or Failed'),
  })
  .meta({ id: 'LoRaDeviceInfoDTO' });

const LoRaEndPointConnectionInfoDTO = z
  .object({
    rssi: z.number().int().describe('RSSI of the last packet, dBm'),
    missedPackets: z.number().int().describe('packets missed, from gaps in the packet ids'),
    receivedPackets: z.number().int().describe('packets received (duplicates not counted)'),
    remoteNodeId: z.number().int(),
    lastPacketId: z.number().int().describe('id of the last packet received (0-255)'),
    lastReadTime: z.number().int().describe('epoch ms'),
    lastWriteTime: z.number().int().describe('epoch ms (0: nothing sent yet)'),
  })
  .meta({ id: 'LoRaEndPointConnectionInfoDTO' });

const tags = ['LoRa Device Management'];
const view = { permission: { permission: 'view_stats' as const } };
const DeviceParam = z.object({ deviceName: z.string() });
const NodeParam = z.object({ deviceName: z.string(), nodeId: z.string() });

function serviceOf(ctx: ApiContext) {
  const s = loraOf(ctx.rt);
  if (!s) throw new NotFoundError('LoRa device not found');
  return s;
}

export const loraRoutes: FastifyPluginAsyncZod<ApiContext> = async (app, ctx) => {
  if (!ctx.rt.config.RestApi.enableInterfaceManagement) return; // as MAPS: LoRaDeviceApi goes with interface management

  app.get(
    '/api/v1/device/lora',
    {
      config: view,
      schema: { tags, summary: 'Retrieve all LoRa devices', response: { 200: z.array(LoRaDeviceInfoDTO), ...ErrorResponses } },
    },
    async () => loraOf(ctx.rt)?.devices() ?? [],
  );

  app.get(
    '/api/v1/device/lora/:deviceName',
    {
      config: view,
      schema: {
        tags,
        summary: 'Retrieve a specific LoRa device',
        params: DeviceParam,
        response: { 200: LoRaDeviceInfoDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      if (!req.params.deviceName.trim()) throw new ValidationError('Device name must not be blank');
      const s = serviceOf(ctx);
      return s.deviceInfo(s.find(req.params.deviceName));
    },
  );

  app.get(
    '/api/v1/device/lora/:deviceName/:nodeId',
    {
      config: view,
      schema: {
        tags,
        summary: 'Retrieve endpoint connections for a LoRa device',
        description:
          "nodeId is a node heard on the radio (its one entry) or the radio's own address (every node heard, as MAPS lists the connections of the local endpoint).",
        params: NodeParam,
        response: { 200: z.array(LoRaEndPointConnectionInfoDTO), ...ErrorResponses },
      },
    },
    async (req) => {
      if (!req.params.deviceName.trim()) throw new ValidationError('Device name must not be blank');
      const raw = req.params.nodeId.trim();
      if (!/^\d{1,10}$/.test(raw) || Number(raw) > 2147483647) throw new ValidationError('Node id must be a valid integer');
      const s = serviceOf(ctx);
      return s.connections(s.find(req.params.deviceName), Number(raw));
    },
  );
};

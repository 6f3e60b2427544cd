import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { machineCatalog } from '../../../../actors/catalog.js';
import { NotFoundError } from '../../../errors.js';
import { machineDefinition, type MachineDefinition, type MachineStateDef } from '../../../runtime/machine-definition.js';
import type { ApiContext } from '../../context.js';
import { ErrorResponses } from '../../schemas.js';

/**
 * Machine definitions (Switchyard extension), with view_stats, for drawing statecharts (the console) and tools:
 * - `GET /api/v1/server/machines` — every machine kind with its number of states and transitions;
 * - `GET /api/v1/server/machines/{kind}` — one definition: the state tree and every transition
 *   (src/runtime/machine-definition.ts), read from the machine objects that docs/machines/*.md are drawn from
 *   (actors/catalog.ts). An actor's `machine` (GET /api/v1/server/actors/{systemId}) is its kind here.
 */

const MachineStateDTO = z
  .object({
    key: z.string(),
    path: z.string().describe("state keys from the root joined by '.', as in an actor's state string; '' for the root"),
    type: z.enum(['atomic', 'compound', 'parallel', 'final', 'history']),
    initial: z.string().nullable().describe('the key of the initial child of a compound state'),
    tags: z.array(z.string()),
    entry: z.array(z.string()),
    exit: z.array(z.string()),
    invoke: z.array(z.string()).describe('actors invoked while in this state'),
    get states(): z.ZodArray<typeof MachineStateDTO> {
      return z.array(MachineStateDTO);
    },
  })
  .meta({ id: 'MachineState' });
const MachineTransitionDTO = z
  .object({
    source: z.string().describe('path of the state that handles the event'),
    targets: z.array(z.string()).describe('paths of the target states; empty: handled without leaving the state'),
    event: z.string().describe('the event as docs/machines label it (after <delay>, done: <actor>, always)'),
    eventType: z.string().describe("the event type matched ('' for an eventless transition)"),
    guard: z.string().nullable(),
    actions: z.array(z.string()),
  })
  .meta({ id: 'MachineTransition' });
const MachineDefinitionDTO = z.object({ kind: z.string(), root: MachineStateDTO, transitions: z.array(MachineTransitionDTO) }).meta({ id: 'MachineDefinition' });
const MachineSummaryDTO = z.object({ kind: z.string(), states: z.number().int(), transitions: z.number().int() }).meta({ id: 'MachineSummary' });

const countStates = (s: MachineStateDef): number => s.states.reduce((n, c) => n + countStates(c), s.states.length);

export const machineRoutes: FastifyPluginAsyncZod<ApiContext> = async (app) => {
  // machine definitions do not change while the server runs: read once, at the first request
  let definitions: Map<string, MachineDefinition> | undefined;
  const all = () => (definitions ??= new Map(machineCatalog.map((m) => [m.id.toLowerCase(), machineDefinition(m)])));
  const config = { permission: { permission: 'view_stats' as const } };
  const tags = ['Server Management'];

  app.get(
    '/api/v1/server/machines',
    {
      config,
      schema: {
        tags,
        summary: 'Every state machine kind (Switchyard extension)',
        description: 'The machine kinds behind the actors (an actor\'s `machine`), with their number of states and transitions. GET /api/v1/server/machines/{kind} has the definition.',
        response: { 200: z.array(MachineSummaryDTO), ...ErrorResponses },
      },
    },
    async () => [...all().values()].map((d) => ({ kind: d.kind, states: countStates(d.root), transitions: d.transitions.length })),
  );

  app.get(
    '/api/v1/server/machines/:kind',
    {
      config,
      schema: {
        tags,
        summary: 'One state machine definition (Switchyard extension)',
        description: 'The state tree (nested and parallel states, initial states, tags, entry and exit actions, invoked actors) and every transition with its source, targets, event, guard and actions: what the console draws as a statechart and docs/machines/<kind>.md shows in Mermaid. The kind is case-insensitive.',
        params: z.object({ kind: z.string().trim().min(1, 'kind is required').max(64) }),
        response: { 200: MachineDefinitionDTO, ...ErrorResponses },
      },
    },
    async (req) => {
      const d = all().get(req.params.kind.toLowerCase());
      if (!d) throw new NotFoundError(`No machine kind "${req.params.kind}"; known kinds: ${[...all().values()].map((m) => m.kind).join(', ')}`);
      return d;
    },
  );
};

/**
 * The device manager: one `device:<name>` actor per I²C sensor under the `devices` supervisor, its readings
 * published as JSON into the engine, and the scan behind `POST /api/v1/server/hardware/scan` (a real scan every
 * time; MAPS caches scan results, reference §14).
 *
 * Devices come from two places: the ones configured under `DeviceManager.buses[].devices` (always tracked; one
 * that does not answer goes to error, backs off, and is offline after `offlineAfter` attempts), and the ones a scan
 * identifies at an address no configured device names, on a bus with `scan: true` (named `<driver>-<bus>-<address>`,
 * e.g. `bme280-1-0x76`, and removed when a later scan no longer finds them).
 *
 * The bus opener is injectable: `openBus` is the real `i2c-bus` (imported lazily, src/devices/i2c/bus.ts) unless a
 * test replaces it before the runtime starts (`rt.service('devices')!.openBus = sim.open`, test/devices/).
 */
import type { ActorRefFrom } from 'xstate';
import { fromPromise } from 'xstate';
import { deviceMachine, deviceStateName, type DeviceReading } from '../../actors/devices/device.machine.js';
import { IngressResult, ingress, ingressContext, refusalText } from '../engine/ingress.js';
import { ConflictError } from '../errors.js';
import { defineActorKind } from '../runtime/actor-kind.js';
import type { CommandRecord } from '../runtime/events.js';
import type { MessagingService } from '../messaging/messaging.service.js';
import type { Runtime, Service } from '../runtime/runtime.js';
import type { DeviceManagerConfig, DeviceOptions } from './config.js';
import { BusHandle } from './i2c/bus-handle.js';
import { hex, openI2cBus, type I2cBus, type I2cBusOpener } from './i2c/bus.js';
import { DRIVERS, type SensorDevice, type SensorDriver } from './i2c/drivers/index.js';

declare module '../runtime/registry.js' {
  interface ActorKinds {
    device: typeof deviceMachine;
  }
}

declare module '../runtime/runtime.js' {
  interface RuntimeServices {
    devices: DevicesService;
  }
}

/**
 * The device kind (src/runtime/actor-kind.ts): `device:<name>` under the `devices` supervisor. No REST word
 * commands it; the scan route tells it `device.found` / `device.gone` through the command helper.
 */
export const deviceKind = defineActorKind({
  kind: 'device',
  machine: deviceMachine,
  supervisor: 'devices',
  noun: 'Device',
  stateName: (snap) => (snap.status === 'active' ? deviceStateName(snap.value) : snap.status === 'done' ? 'Removed' : 'Error'),
  routes: ['POST /api/v1/server/hardware/scan'],
});

/** MAPS DeviceInfoDTO. */
export interface DeviceInfo {
  name: string;
  description: string;
  type: string;
  state: string;
}

export interface DeviceEntry {
  name: string;
  driver: SensorDriver;
  bus: BusHandle;
  address: number;
  topic: string;
  interval: number;
  options: DeviceOptions;
  /** Configured devices stay when a scan misses them; scanned ones are removed. */
  configured: boolean;
  device?: SensorDevice;
  /** Logged once per failure streak. */
  failing: boolean;
  published: number;
  publishFailures: number;
}

/** What the devices service is given (src/compose.ts): readings go into the engine. */
export interface DevicesDeps {
  messaging: MessagingService;
}

export class DevicesService implements Service {
  readonly name = 'devices';
  readonly dependsOn: readonly string[];

  constructor(private readonly deps: DevicesDeps) {
    this.dependsOn = Object.keys(deps);
  }

  /** Opens `/dev/i2c-N`; the real i2c-bus by default. Tests replace it before `rt.start()`. */
  openBus: I2cBusOpener = openI2cBus;
  readonly entries = new Map<string, DeviceEntry>();
  readonly buses = new Map<number, BusHandle>();
  private rt!: Runtime;
  private cfg!: DeviceManagerConfig;
  private scanning: Promise<unknown> = Promise.resolve();
  private queued?: Promise<string[]>;
  /** The last scan failure per bus (logged when it changes, not at every request). */
  private readonly scanErrors = new Map<number, string>();

  async start(rt: Runtime): Promise<void> {
    this.rt = rt;
    this.cfg = rt.config.DeviceManager;
    this.entries.clear();
    this.buses.clear();
    this.scanErrors.clear();
    for (const b of this.cfg.buses) {
      const handle = new BusHandle(b.bus, () => this.openBus);
      this.buses.set(b.bus, handle);
      for (const d of b.devices) {
        this.entries.set(d.name, {
          name: d.name,
          driver: DRIVERS[d.driver],
          bus: handle,
          address: d.address,
          topic: d.topic ?? this.cfg.topicPrefix + d.name,
          interval: d.interval ?? this.cfg.interval,
          options: d.options,
          configured: true,
          failing: false,
          published: 0,
          publishFailures: 0,
        });
      }
    }
  }

  async running(): Promise<void> {
    for (const e of this.entries.values()) this.spawn(e);
    if (this.cfg.scanOnStart && this.buses.size > 0) {
      try {
        await this.scan();
      } catch (err) {
        this.rt.log.warn({ err: (err as Error).message }, 'device scan at start failed');
      }
    }
  }

  async stop(): Promise<void> {
    // the device actors were stopped with the tree; close the buses once their transactions are done
    await Promise.all([...this.buses.values()].map((b) => b.close()));
    for (const e of this.entries.values()) e.device = undefined;
  }

  // ------------------------------------------------------------------------------------------------------------

  private logic() {
    return deviceMachine.provide({
      actors: {
        initDevice: fromPromise<void, { name: string }>(async ({ input }) => {
          const e = this.entry(input.name);
          try {
            await e.bus.exclusive(async (bus) => {
              const dev = e.driver.open(bus, e.address, e.options);
              await dev.init();
              e.device = dev;
            });
          } catch (err) {
            this.failed(e, err, 'initialise');
            throw err;
          }
        }),
        readDevice: fromPromise<DeviceReading, { name: string }>(async ({ input }) => {
          const e = this.entry(input.name);
          try {
            const dev = e.device;
            if (!dev) throw new Error('not initialised');
            const reading = await e.bus.exclusive(() => dev.read());
            if (e.failing) this.rt.log.info({ device: e.name }, `device ${e.name} answers again`);
            e.failing = false;
            return reading;
          } catch (err) {
            this.failed(e, err, 'read');
            throw err;
          }
        }),
      },
      actions: {
        publishReading: ({ context, event }) => {
          const e = this.entries.get(context.name);
          if (e) this.publish(e, (event as unknown as { output: DeviceReading }).output);
        },
      },
    });
  }

  private failed(e: DeviceEntry, err: unknown, what: string): void {
    if (e.failing) return;
    e.failing = true;
    this.rt.log.warn(
      { device: e.name, bus: e.bus.path, address: hex(e.address), err: (err as Error).message },
      `device ${e.name} could not ${what}; retrying with backoff`,
    );
  }

  private entry(name: string): DeviceEntry {
    const e = this.entries.get(name);
    if (!e) throw new Error(`device "${name}" is not known`);
    return e;
  }

  /** The JSON a reading is published as: the device, driver, time, then the quantities (units: docs/devices.md). */
  private publish(e: DeviceEntry, reading: DeviceReading): void {
    const engine = this.deps.messaging.engine;
    if (!engine || engine.isClosed) return;
    const payload = JSON.stringify({ device: e.name, driver: e.driver.id, time: new Date(this.rt.now()).toISOString(), ...reading });
    e.published++;
    // the one ingress path (src/engine/ingress.ts): the device is configured, so no ACL; $SYS, the payload schema and
    // flow control apply as to any publisher
    const cx = ingressContext(engine, undefined, undefined, e.topic, { payload, contentType: 'application/json' }, { origin: `device:${e.name}` });
    const result = ingress(cx);
    if (result !== IngressResult.Accepted) {
      if (e.publishFailures++ === 0) this.rt.log.warn({ device: e.name, topic: e.topic, err: refusalText(cx, result) }, 'device reading could not be published');
      return;
    }
    cx.written!.catch((err: unknown) => {
      if (e.publishFailures++ === 0) this.rt.log.warn({ device: e.name, topic: e.topic, err: (err as Error).message }, 'device reading could not be published');
    });
  }

  private spawn(e: DeviceEntry): void {
    deviceKind.spawn(this.rt, e.name, {
      logic: this.logic(),
      input: { name: e.name, interval: e.interval, retryInitial: this.cfg.retryInitial, retryMax: this.cfg.retryMax, offlineAfter: this.cfg.offlineAfter },
    });
  }

  actor(e: DeviceEntry): ActorRefFrom<typeof deviceMachine> | undefined {
    return deviceKind.lookup(this.rt, e.name);
  }

  state(e: DeviceEntry): string {
    return deviceKind.state(this.rt, e.name, 'Removed');
  }

  private readonly report = (r: CommandRecord) => this.rt.emit('actor.command', r);

  /** GET /api/v1/server/hardware: every tracked device (DeviceInfoDTO), by name. */
  list(): DeviceInfo[] {
    return [...this.entries.values()]
      .sort((a, b) => a.name.localeCompare(b.name))
      .map((e) => ({
        name: e.name,
        description: `${e.driver.description} on ${e.bus.path} at ${hex(e.address)}`,
        type: 'SENSOR',
        state: this.state(e),
      }));
  }

  /**
   * Scans every configured bus now (one scan at a time; a request arriving during a scan runs its own scan after
   * it) and answers the names of the devices found. Configured devices found while offline or in error retry at
   * once; new chips at addresses a driver knows are added on buses with `scan: true`; scanned devices no longer
   * found are removed. A bus that cannot be opened is logged and skipped; when every configured bus fails, 409.
   */
  scan(): Promise<string[]> {
    // bounded: at most one scan runs and one waits; requests arriving while one waits share it (it starts after
    // them, so each still gets a scan made after it asked)
    if (this.queued) return this.queued;
    const run = this.scanning.then(() => {
      this.queued = undefined;
      return this.scanOnce();
    });
    this.queued = run;
    this.scanning = run.catch(() => undefined);
    return run;
  }

  private async scanOnce(): Promise<string[]> {
    const found: string[] = [];
    const failures: string[] = [];
    for (const busCfg of this.cfg.buses) {
      const handle = this.buses.get(busCfg.bus)!;
      let present: Map<number, SensorDriver | undefined>;
      try {
        present = await handle.exclusive((bus) => this.identify(bus));
      } catch (err) {
        const message = (err as Error).message;
        failures.push(message);
        if (this.scanErrors.get(busCfg.bus) !== message) this.rt.log.warn({ bus: handle.path, err: message }, 'I²C bus scan failed'); // once per distinct failure
        this.scanErrors.set(busCfg.bus, message);
        continue;
      }
      this.scanErrors.delete(busCfg.bus);
      const claimed = new Set<number>();
      for (const e of this.entries.values()) {
        if (e.bus !== handle || !e.configured) continue;
        claimed.add(e.address);
        if (present.has(e.address) && (present.get(e.address) === e.driver || (await this.probe(handle, e)))) {
          found.push(e.name);
          this.wake(e);
        }
      }
      if (busCfg.scan) {
        for (const [address, driver] of present) {
          if (claimed.has(address) || !driver) continue;
          const name = `${driver.id}-${busCfg.bus}-${hex(address)}`;
          let e = this.entries.get(name);
          if (!e) {
            if (this.entries.size >= this.cfg.maxDevices) {
              this.rt.log.warn({ device: name, maxDevices: this.cfg.maxDevices }, 'device not added: DeviceManager.maxDevices reached');
              continue;
            }
            e = {
              name,
              driver,
              bus: handle,
              address,
              topic: this.cfg.topicPrefix + name,
              interval: this.cfg.interval,
              options: {},
              configured: false,
              failing: false,
              published: 0,
              publishFailures: 0,
            };
            this.entries.set(name, e);
            this.rt.log.info({ device: name, bus: handle.path, address: hex(address), topic: e.topic }, `device ${name} found (${driver.description})`);
            this.spawn(e);
          } else this.wake(e);
          found.push(name);
        }
        // scanned devices on this bus that are no longer there: removed
        for (const e of [...this.entries.values()]) {
          if (e.bus !== handle || e.configured || found.includes(e.name)) continue;
          this.rt.log.info({ device: e.name }, `device ${e.name} is gone; removed`);
          // through the command helper (reported on the bus); a device already removed has nothing to take it
          deviceKind.tell(this.report, this.actor(e), e.name, { type: 'device.gone' }).catch(() => {});
          this.rt.stopChild('devices', `device:${e.name}`);
          this.entries.delete(e.name);
        }
      }
    }
    if (failures.length > 0 && failures.length === this.cfg.buses.length) throw new ConflictError(`No I²C bus could be scanned: ${failures.join('; ')}`);
    return found.sort();
  }

  /** A device found by a scan: one offline or in error retries now. */
  private wake(e: DeviceEntry): void {
    const a = this.actor(e);
    if (!a) this.spawn(e);
    else if (a.getSnapshot().can({ type: 'device.found' })) void deviceKind.tell(this.report, a, e.name, { type: 'device.found' }).catch(() => {});
  }

  private probe(handle: BusHandle, e: DeviceEntry): Promise<boolean> {
    return handle.exclusive((bus) => e.driver.probe(bus, e.address));
  }

  /** Addresses that acknowledge on the bus, each with the driver that identifies the chip there (if any). */
  private async identify(bus: I2cBus): Promise<Map<number, SensorDriver | undefined>> {
    const acks = await bus.scan(0x03, 0x77);
    const out = new Map<number, SensorDriver | undefined>();
    for (const address of acks) {
      let match: SensorDriver | undefined;
      for (const d of Object.values(DRIVERS)) {
        if (d.addresses.includes(address) && (await d.probe(bus, address))) {
          match = d;
          break;
        }
      }
      out.set(address, match);
    }
    return out;
  }
}

export function devicesService(deps: DevicesDeps): DevicesService {
  return new DevicesService(deps);
}

/** The device service of a runtime, or undefined (not registered). */
export function devicesOf(rt: Runtime): DevicesService | undefined {
  return rt.service('devices');
}

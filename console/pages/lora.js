// LoRa: the radios with their state and counters, and the nodes each has heard, polled every 5 s.
import { html } from '../lib/html.js';
import { useApi } from '../lib/hooks.js';
import { Loaded, Page, stateClass } from '../lib/components.js';
import { fmtBytes, fmtNum, fmtTime } from '../lib/format.js';
import { href } from '../lib/router.js';

export const page = { path: '/lora', label: 'LoRa', group: 'Integrations & devices', order: 87, view: LoRa };

function LoRa() {
  const [list] = useApi('/api/v1/device/lora', 5000);
  return html`<${Page} title="LoRa" curl="/api/v1/device/lora">
    <${Loaded} state=${list}>${(radios) =>
      radios.length === 0
        ? html`<p class="notice">No LoRa radios are configured (LoRaDeviceManager, docs/lora.md).</p>`
        : radios.map(
            (r) => html`<section aria-labelledby=${`lora-${r.name}`}>
        <h2 id=${`lora-${r.name}`}><a href=${href('/actor', { id: `lora:${r.name}` })}>${r.name}</a> <span class=${stateClass(r.state)}>${r.state}</span></h2>
        <dl class="facts">
          <div><dt>Port</dt><dd>${r.port}</dd></div><div><dt>Module</dt><dd>${r.module || '–'}</dd></div>
          <div><dt>Sent</dt><dd>${fmtNum(r.packetsSent)} packets, ${fmtBytes(r.bytesSent)}</dd></div>
          <div><dt>Received</dt><dd>${fmtNum(r.packetsReceived)} packets, ${fmtBytes(r.bytesReceived)}</dd></div>
          ${r.lastError ? html`<div><dt>Last error</dt><dd>${r.lastError}</dd></div>` : null}
        </dl>
        <div class="wrap"><table><caption>${r.endPointInfoList.length} nodes heard</caption>
          <thead><tr><th scope="col">Node</th><th scope="col" class="num">Last RSSI</th><th scope="col" class="num">Downlink queue</th><th scope="col">Last packet from</th><th scope="col">Last packet to</th></tr></thead>
          <tbody>${r.endPointInfoList.slice(0, 256).map((n) => html`<tr><th scope="row">${n.nodeId}</th><td class="num">${n.lastRSSI ? `${n.lastRSSI} dBm` : '–'}</td><td class="num">${fmtNum(n.incomingQueueSize)} msg</td><td>${fmtTime(n.lastRead)}</td><td>${fmtTime(n.lastWrite)}</td></tr>`)}</tbody>
        </table></div>
      </section>`,
          )}<//>
  <//>`;
}

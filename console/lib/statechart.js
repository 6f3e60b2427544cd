// Statecharts: a machine definition (GET /api/v1/server/machines/{kind}) laid out by elkjs and drawn as SVG, with
// the active states highlighted and a transition that has just fired animated. elkjs (about 450 KB gzipped) is in
// its own file, dist/console/elk.js, imported here on first use: only the statechart pages load it.
import { useEffect, useState } from 'preact/hooks';
import { html } from './html.js';

let elkModule;
/** The layout module, fetched once (a second caller waits for the same import). */
const loadElk = () => (elkModule ??= import('/console/elk.js'));

const CHAR_W = 6.7; // average glyph width of the 11-12 px system-ui labels, for sizing boxes before layout
const nodeId = (path) => `s:${path}`;
const initialId = (path) => `i:${path}`;
const transitionLabel = (t) => `${t.event}${t.guard ? ` [${t.guard}]` : ''}`;

/** Every state of a definition by path (the root is ''). */
export function statesByPath(def) {
  const map = new Map();
  const walk = (s, parent) => {
    map.set(s.path, { ...s, parent });
    for (const c of s.states) walk(c, s.path);
  };
  walk(def.root, null);
  return map;
}

/**
 * The active state paths (each leaf and its ancestors) of an actor's state string: `listening.paused`, or for
 * parallel states regions joined by ',' where a later region may be relative to the parallel state of an earlier
 * one (`live.run.active,load.normal` is live.run.active and live.load.normal).
 */
export function activePaths(def, stateString) {
  const states = statesByPath(def);
  const active = new Set();
  let previous = '';
  for (const seg of String(stateString ?? '').split(',').map((s) => s.trim()).filter(Boolean)) {
    // the first region is a path from the root; a later one is relative to a parallel ancestor of the one before
    const bases = [];
    for (let p = states.get(previous)?.parent; p !== null && p !== undefined; p = states.get(p)?.parent) bases.push(p);
    const at = (base) => (base ? `${base}.${seg}` : seg);
    const found =
      (previous ? bases.find((b) => states.get(b)?.type === 'parallel' && states.has(at(b))) : undefined) ??
      ['', ...bases].find((b) => states.has(at(b)));
    if (found === undefined) continue;
    const path = at(found);
    previous = path;
    for (let p = path; p; p = states.get(p)?.parent ?? '') active.add(p);
  }
  return active;
}

/**
 * The indexes of the definition's transitions an actor transition ({from, to, event}) took: same event type, a
 * source that was active before, a target that is active after (several for an event handled by parallel regions).
 */
export function firedTransitions(def, t) {
  if (!t) return [];
  const before = activePaths(def, t.from);
  const after = activePaths(def, t.to);
  const hits = [];
  def.transitions.forEach((d, i) => {
    if (d.eventType !== t.event && !(d.eventType === '' && t.event === '')) return;
    if (!before.has(d.source) && d.source !== '') return;
    if (d.targets.length && !d.targets.some((p) => after.has(p))) return;
    hits.push(i);
  });
  return hits;
}

/** The ELK graph of a definition: states as nested nodes, a dot for each initial state, transitions as edges. */
function elkGraph(def) {
  const edges = [];
  const node = (s) => {
    const children = s.states.map(node);
    if (s.initial) {
      children.unshift({ id: initialId(s.path), width: 10, height: 10 });
      edges.push({ id: `init:${s.path}`, sources: [initialId(s.path)], targets: [nodeId(s.path ? `${s.path}.${s.initial}` : s.initial)] });
    }
    if (!s.states.length) return { id: nodeId(s.path), width: Math.max(70, s.key.length * CHAR_W * 1.1 + 24), height: s.tags.length ? 44 : 32 };
    return {
      id: nodeId(s.path),
      children,
      layoutOptions: { 'elk.padding': '[top=30,left=14,bottom=14,right=14]', 'elk.nodeSize.minimum': `(${s.key.length * CHAR_W * 1.1 + 28}, 40)` },
    };
  };
  const root = node(def.root);
  def.transitions.forEach((t, i) => {
    if (!t.source) return; // the root's own handlers are listed beside the chart
    t.targets.forEach((target, j) => {
      const text = transitionLabel(t);
      edges.push({
        id: `t:${i}:${j}`,
        sources: [nodeId(t.source)],
        targets: [nodeId(target)],
        labels: [{ text, width: text.length * CHAR_W + 6, height: 14 }],
      });
    });
  });
  return {
    id: 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'RIGHT',
      'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
      // every coordinate relative to the root, so edges between nested states need no offsets when drawn
      'elk.json.edgeCoords': 'ROOT',
      'elk.json.shapeCoords': 'ROOT',
      'elk.edgeRouting': 'ORTHOGONAL',
      'elk.layered.spacing.nodeNodeBetweenLayers': '40',
      'elk.spacing.nodeNode': '22',
      'elk.spacing.edgeLabel': '3',
      'elk.edgeLabels.inline': 'false',
    },
    children: root.children ?? [],
    edges,
  };
}

const layouts = new Map(); // kind → Promise of the laid-out graph: a definition is laid out once per page load

/** Lays out a definition (cached by kind); resolves to { graph, states }. */
export function layoutMachine(def) {
  let p = layouts.get(def.kind);
  if (!p) {
    p = loadElk()
      .then((m) => m.layout(elkGraph(def)))
      .then((graph) => ({ graph, states: statesByPath(def) }));
    layouts.set(def.kind, p);
    p.catch(() => layouts.delete(def.kind));
  }
  return p;
}

function flatten(n, out = []) {
  for (const c of n.children ?? []) {
    out.push(c);
    flatten(c, out);
  }
  return out;
}

const pathD = (s) => [s.startPoint, ...(s.bendPoints ?? []), s.endPoint].map((p, i) => `${i ? 'L' : 'M'}${p.x} ${p.y}`).join(' ');

/**
 * A machine drawn as a statechart. `active`: the set of active state paths; `fired`: indexes of transitions to
 * animate (a new `seq` replays the animation); `title`: the accessible name of the drawing.
 */
export function Statechart({ def, active, fired = [], seq = 0, title }) {
  const [laid, setLaid] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let live = true;
    setLaid(null);
    layoutMachine(def).then(
      (l) => live && setLaid(l),
      (e) => live && setError(e),
    );
    return () => {
      live = false;
    };
  }, [def]);
  if (error) return html`<p class="error" role="alert">The statechart could not be laid out: ${String(error?.message ?? error)}</p>`;
  if (!laid) return html`<p class="notice" role="status">Laying out the ${def.kind} statechart…</p>`;
  const { graph, states } = laid;
  const firedSet = new Set(fired);
  const nodes = flatten(graph);
  const entered = new Set();
  for (const i of fired) for (const t of def.transitions[i]?.targets ?? []) entered.add(t);
  const W = Math.ceil(graph.width + 8);
  const H = Math.ceil(graph.height + 8);
  const activeLeaves = [...(active ?? [])].filter((p) => p && !states.get(p)?.states.length);
  const desc = activeLeaves.length ? `Current state: ${activeLeaves.join(', ')}` : 'No current state';
  return html`<figure class="chart">
    <svg viewBox=${`-4 -4 ${W} ${H}`} width=${W} height=${H} role="img" aria-label=${`${title}. ${desc}`} data-kind=${def.kind} data-active=${activeLeaves.join(',')}>
      <defs>
        <marker id=${`arrow-${def.kind}`} viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" class="arrowhead" /></marker>
      </defs>
      ${nodes.map((n) => {
        if (n.id.startsWith('i:')) return html`<circle class="initial" cx=${n.x + 5} cy=${n.y + 5} r="5" />`;
        const path = n.id.slice(2);
        const s = states.get(path);
        if (!s) return null;
        const compound = s.states.length > 0;
        const region = states.get(s.parent)?.type === 'parallel';
        const cls = ['state', compound ? 'compound' : 'atomic', region ? 'region' : '', s.type === 'final' ? 'final' : '', active?.has(path) ? 'active' : '', entered.has(path) ? `entered ${seq % 2 ? 'a' : 'b'}` : '']
          .filter(Boolean)
          .join(' ');
        return html`<g class=${cls} data-state=${path}>
          <title>${path}${s.tags.length ? ` [${s.tags.join(', ')}]` : ''}${s.invoke.length ? `, invokes ${s.invoke.join(', ')}` : ''}</title>
          <rect x=${n.x} y=${n.y} width=${n.width} height=${n.height} rx=${compound ? 10 : 14} />
          ${s.type === 'final' ? html`<rect class="inner" x=${n.x + 3} y=${n.y + 3} width=${n.width - 6} height=${n.height - 6} rx="11" />` : null}
          <text x=${compound ? n.x + 10 : n.x + n.width / 2} y=${compound ? n.y + 18 : n.y + (s.tags.length ? 19 : 20)} class=${compound ? 'label compound-label' : 'label'}>${s.key}${s.type === 'parallel' ? ' ∥' : ''}</text>
          ${!compound && s.tags.length ? html`<text x=${n.x + n.width / 2} y=${n.y + 34} class="tag">${s.tags.join(', ')}</text>` : null}
        </g>`;
      })}
      ${(graph.edges ?? []).map((e) => {
        const sec = e.sections?.[0];
        if (!sec) return null;
        const idx = e.id.startsWith('t:') ? Number(e.id.split(':')[1]) : -1;
        const on = firedSet.has(idx);
        const cls = `edge${e.id.startsWith('init:') ? ' init' : ''}${on ? ` fired ${seq % 2 ? 'a' : 'b'}` : ''}`;
        const label = e.labels?.[0];
        return html`<g class=${cls} data-transition=${idx >= 0 ? idx : undefined}>
          <path d=${pathD(sec)} marker-end=${`url(#arrow-${def.kind})`} />
          ${label ? html`<text x=${label.x + 3} y=${label.y + 11} class="edge-label">${label.text}</text>` : null}
        </g>`;
      })}
    </svg>
  </figure>`;
}

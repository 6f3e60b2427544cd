// The graph layout for the statechart pages (docs/console.md, "Statecharts"): elkjs, bundled on its own into
// dist/console/elk.js and imported by those pages only, so the first page does not carry it.
// elk.bundled.js runs the layout in this thread (its "fake worker"): no Worker, no blob: URL, no eval, which the
// console's Content-Security-Policy would refuse.
import ELK from 'elkjs/lib/elk.bundled.js';

let elk;
/** Lays out an ELK graph (https://eclipse.dev/elk/documentation/tooldevelopers/graphdatastructure/jsonformat.html). */
export function layout(graph) {
  elk ??= new ELK();
  return elk.layout(graph);
}

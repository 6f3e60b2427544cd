/** Normative statements of PUBLISH, its acknowledgements and the QoS flows, against each broker (./harness.ts). */
import { runCases } from './harness.js';
import { publishCases } from './cases/publish.js';

runCases('PUBLISH', publishCases);

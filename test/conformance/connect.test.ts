/** Normative statements of CONNECT and CONNACK, sessions and the will, against each broker (./harness.ts). */
import { runCases } from './harness.js';
import { connectCases } from './cases/connect.js';

runCases('CONNECT', connectCases);

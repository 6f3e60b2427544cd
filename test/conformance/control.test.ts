/** Normative statements of data representation, packet format, PINGREQ, DISCONNECT, AUTH and errors, against each broker (./harness.ts). */
import { runCases } from './harness.js';
import { controlCases } from './cases/control.js';

runCases('CONTROL', controlCases);

/** Normative statements of SUBSCRIBE, UNSUBSCRIBE and topic filters, against each broker (./harness.ts). */
import { runCases } from './harness.js';
import { subscribeCases } from './cases/subscribe.js';

runCases('SUBSCRIBE', subscribeCases);

// Templates: htm bound to Preact's h, so views are tagged template literals and need no JSX transform.
import { h } from 'preact';
import htm from 'htm';

export const html = htm.bind(h);

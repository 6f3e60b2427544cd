// Formatting: numbers with units, times in the viewer's zone.

const nf = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
export const fmtNum = (n) => (typeof n === 'number' && Number.isFinite(n) ? nf.format(n) : '–');
export const fmtRate = (n, unit) => `${fmtNum(n)} ${unit}/s`;
export function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${nf.format(n)} ${units[i]}`;
}
const dateTime = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', timeZoneName: 'short' });
/** A date and time in the viewer's zone, the zone named (`27 Nov 2026, 03:04:05 GMT+1`). */
export const fmtTime = (ms) => (typeof ms === 'number' && ms > 0 ? dateTime.format(new Date(ms)) : '–');
/** A count with its unit: `1,234 msg`. */
export const fmtCount = (n, unit) => (typeof n === 'number' && Number.isFinite(n) ? `${nf.format(n)} ${unit}` : '–');

/** A clock time with milliseconds in the viewer's zone, for transition timelines. */
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 3, hour12: false });
export const fmtClock = (ms) => (typeof ms === 'number' && ms > 0 ? clock.format(new Date(ms)) : '–');

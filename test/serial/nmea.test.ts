/** NMEA-0183 codec: framing, checksum, line cap and the decoded fields of the common sentences. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeSentence, NmeaLineReader, nmeaChecksum, nmeaDegrees, nmeaSentence, parseSentence, sentenceWanted } from '../../src/devices/nmea.js';

// Widely published example sentences, with the checksums their sources print.
const GGA = '$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47';
const RMC = '$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A';
const GSA = '$GPGSA,A,3,04,05,,09,12,,,24,,,,,2.5,1.3,2.1*39';
const GSV = '$GPGSV,2,1,08,01,40,083,46,02,17,308,41,12,07,344,39,14,22,228,45*75';
const VTG = '$GPVTG,054.7,T,034.4,M,005.5,N,010.2,K*48';

function decode(line: string) {
  const r = parseSentence(line);
  assert.ok(r.ok, `${line} parses`);
  return decodeSentence(r.sentence);
}

test('nmea - checksums of the published example sentences verify', () => {
  for (const line of [GGA, RMC, GSA, GSV, VTG]) {
    const r = parseSentence(line);
    assert.ok(r.ok, line);
    assert.equal(nmeaSentence(line.slice(1, line.indexOf('*'))), line);
  }
  assert.equal(nmeaChecksum('GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,'), 0x47);
});

test('nmea - a wrong checksum, a missing checksum and bad framing are refused with their reason', () => {
  assert.deepEqual(parseSentence(GGA.replace('*47', '*48')), { ok: false, reason: 'checksum' });
  assert.deepEqual(parseSentence(GGA.replace('545.4', '545.5')), { ok: false, reason: 'checksum' });
  assert.deepEqual(parseSentence(GGA.slice(0, -3)), { ok: false, reason: 'malformed' });
  assert.deepEqual(parseSentence('GPGGA,1*00'), { ok: false, reason: 'malformed' });
  assert.deepEqual(parseSentence(nmeaSentence('gp,1')), { ok: false, reason: 'malformed' });
  assert.deepEqual(parseSentence('$GPGGA,\u00e9*00'), { ok: false, reason: 'malformed' });
});

test('nmea - GGA: position in signed decimal degrees, fix, satellites, altitude', () => {
  const d = decode(GGA);
  assert.equal(d.sentence, 'GPGGA');
  assert.equal(d.talker, 'GP');
  assert.equal(d.type, 'GGA');
  assert.equal(d.time, '12:35:19');
  assert.equal(d.latitude, 48.1173);
  assert.equal(d.longitude, 11.516667);
  assert.equal(d.fixQuality, 1);
  assert.equal(d.fixType, 'gps');
  assert.equal(d.satellites, 8);
  assert.equal(d.hdop, 0.9);
  assert.equal(d.altitude, 545.4);
  assert.equal(d.geoidSeparation, 46.9);
  assert.equal(d.dgpsAge, null);
  assert.equal(d.raw, GGA);
  assert.equal(nmeaDegrees('3345.1234', 'S'), -33.752057);
  assert.equal(nmeaDegrees('15112.5000', 'W'), -151.208333);
});

test('nmea - RMC: validity, speed, course, date and an ISO timestamp, magnetic variation west negative', () => {
  const d = decode(RMC);
  assert.equal(d.valid, true);
  assert.equal(d.speedKnots, 22.4);
  assert.equal(d.course, 84.4);
  assert.equal(d.date, '1994-03-23');
  assert.equal(d.timestamp, '1994-03-23T12:35:19.000Z');
  assert.equal(d.magneticVariation, -3.1);
  assert.equal(d.latitude, 48.1173);
});

test('nmea - GSA, GSV and VTG fields', () => {
  const a = decode(GSA);
  assert.equal(a.selectionMode, 'A');
  assert.equal(a.fixType, '3D');
  assert.deepEqual(a.satellites, [4, 5, 9, 12, 24]);
  assert.deepEqual([a.pdop, a.hdop, a.vdop], [2.5, 1.3, 2.1]);
  const v = decode(GSV);
  assert.deepEqual([v.totalMessages, v.messageNumber, v.satellitesInView], [2, 1, 8]);
  assert.deepEqual((v.satellites as unknown[])[0], { prn: 1, elevation: 40, azimuth: 83, snr: 46 });
  assert.equal((v.satellites as unknown[]).length, 4);
  const t = decode(VTG);
  assert.deepEqual([t.courseTrue, t.courseMagnetic, t.speedKnots, t.speedKmh], [54.7, 34.4, 5.5, 10.2]);
  const old = decode(nmeaSentence('GPVTG,054.7,034.4,005.5,010.2'));
  assert.deepEqual([old.courseTrue, old.courseMagnetic, old.speedKnots, old.speedKmh], [54.7, 34.4, 5.5, 10.2]);
  const p = decode(nmeaSentence('PUBX,00,081350.00'));
  assert.deepEqual([p.sentence, p.talker, p.type, p.fields], ['PUBX', 'P', 'UBX', ['00', '081350.00']]);
});

test('nmea - the line reader splits CRLF lines across chunks, resynchronises at $, and drops an overlong line whole', () => {
  const lines: string[] = [];
  let overlong = 0;
  const r = new NmeaLineReader(82, (l) => lines.push(l), () => overlong++);
  r.push(`garbage${GGA.slice(0, 20)}`);
  r.push(`${GGA.slice(20)}\r\n${RMC}\r`);
  r.push(`\n$GP${'X'.repeat(200)}`);
  assert.ok(r.pending <= 82);
  r.push(`${'Y'.repeat(50)}\r\n${VTG}\n`);
  assert.deepEqual(lines, [GGA, RMC, VTG]);
  assert.equal(overlong, 1);
});

test('nmea - the sentences filter matches a type for every talker or one talker', () => {
  const r = parseSentence(nmeaSentence('GNGGA,1'));
  assert.ok(r.ok);
  assert.equal(sentenceWanted(r.sentence, undefined), true);
  assert.equal(sentenceWanted(r.sentence, ['GGA']), true);
  assert.equal(sentenceWanted(r.sentence, ['GNGGA']), true);
  assert.equal(sentenceWanted(r.sentence, ['GPGGA', 'RMC']), false);
});

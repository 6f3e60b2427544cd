import protobuf from 'protobufjs';
import avro from 'avsc';
import { encode as cborEncode } from 'cbor-x';
import { encode as msgpackEncode } from '@msgpack/msgpack';

const PROTO = 'syntax = "proto2"; package demo; message Reading { required double temperature = 1; optional string unit = 2; }';
const AVRO = { type: 'record', name: 'Reading', fields: [{ name: 'temperature', type: 'double' }] };
const Reading = protobuf.parse(PROTO).root.lookupType('demo.Reading');
const objectSchema = { type: 'object', properties: { temperature: { type: 'number' } }, required: ['temperature'] };

/** One schema per format with a payload that conforms and one that does not. */
export const FORMAT_CASES: Array<{ format: string; schema: unknown; valid: Buffer; invalid: Buffer }> = [
  { format: 'json', schema: objectSchema, valid: Buffer.from('{"temperature": 21.5}'), invalid: Buffer.from('{"temperature": "hot"}') },
  { format: 'protobuf', schema: { proto: PROTO, messageName: 'demo.Reading' }, valid: Buffer.from(Reading.encode({ temperature: 21.5 }).finish()), invalid: Buffer.from([0xff, 0xff, 0xff]) },
  { format: 'avro', schema: AVRO, valid: avro.Type.forSchema(AVRO as avro.Schema).toBuffer({ temperature: 21.5 }), invalid: Buffer.from([1, 2, 3]) },
  { format: 'xml', schema: { rootElement: 'reading' }, valid: Buffer.from('<reading><t>21.5</t></reading>'), invalid: Buffer.from('<reading><t>21.5</reading>') },
  {
    format: 'csv',
    schema: { columns: [{ name: 'id', type: 'integer' }, { name: 'temperature', type: 'number' }] },
    valid: Buffer.from('1,21.5\n2,22\n'),
    invalid: Buffer.from('1,hot\n'),
  },
  { format: 'cbor', schema: objectSchema, valid: Buffer.from(cborEncode({ temperature: 21.5 })), invalid: Buffer.from([0x1c]) },
  { format: 'messagepack', schema: objectSchema, valid: Buffer.from(msgpackEncode({ temperature: 21.5 })), invalid: Buffer.from(msgpackEncode({ temperature: 'hot' })) },
  { format: 'native', schema: { type: 'number' }, valid: Buffer.from('21.5'), invalid: Buffer.from('warm') },
  { format: 'raw', schema: { maxLength: 8 }, valid: Buffer.from('8 bytes!'), invalid: Buffer.from('more than eight bytes') },
];

/** SchemaPostDTO for a config. */
export function schemaPost(config: Record<string, unknown>, context: string): { schema: string; context: string } {
  return { schema: JSON.stringify(config), context };
}

/** The wire fields of MAPS DTOs (reference section 4), shared by the engine and REST tests. */
export const DESTINATION_DTO_FIELDS = [
  'delayedMessages',
  'deleteTimeAveNs',
  'deliveredMessages',
  'expiredMessages',
  'name',
  'noInterestMessages',
  'pendingMessages',
  'publishedMessages',
  'readTimeAveNs',
  'retrievedMessages',
  'schemaId',
  'storedMessages',
  'type',
  'writeTimeAveNs',
];

/** A record that does not have the schema's shape: the message names the field. */
export class Invalid extends Error {}

/** A bad flag: the message names it, and the CLI exits 2 before any I/O. */
export class SimulateOptionError extends Error {}

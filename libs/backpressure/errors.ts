/** Error thrown for invalid backpressure options. `option` names the offending option. */
export class BackpressureError extends Error {
  readonly code = 'ERR_INVALID_BACKPRESSURE_OPTION' as const;
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.name = 'BackpressureError';
    this.option = option;
  }
}

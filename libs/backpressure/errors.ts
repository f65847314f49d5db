/** Error thrown for invalid backpressure options. `option` names the offending option. */
export class BackpressureError extends Error {
  readonly code = 'invalid_backpressure_option' as const;
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.name = 'BackpressureError';
    this.option = option;
  }
}

/** Error thrown for invalid batch policy options. `option` names the offending option (dotted/indexed path). */
export class BatchingError extends Error {
  readonly code = 'invalid_batch_option' as const;
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.name = 'BatchingError';
    this.option = option;
  }
}

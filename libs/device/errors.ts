export class DeviceError extends Error {
  readonly code = 'ERR_DEVICE';
  constructor(message: string) {
    super(message);
    this.name = 'DeviceError';
  }
}

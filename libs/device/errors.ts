export class DeviceError extends Error {
  readonly code = 'device';
  constructor(message: string) {
    super(message);
    this.name = 'DeviceError';
  }
}

export class TenantFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TenantFileError';
  }
}

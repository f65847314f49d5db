/** A token file or TLS file that cannot be used; the message names the file (never its content). */
export class AdminSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AdminSetupError';
  }
}

/** A key file that is not what it must be; the message names the file, never its content. */
export class SigningKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SigningKeyError';
  }
}

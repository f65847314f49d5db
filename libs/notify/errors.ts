export type NotifyErrorCode = 'notify_socket_invalid' | 'watchdog_invalid';

export class NotifyError extends Error {
  constructor(
    readonly code: NotifyErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'NotifyError';
  }
}

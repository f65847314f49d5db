/** A reload (or registry change) asked while another one is still in progress: answered 409. */
export class ReloadBusyError extends Error {
  readonly code = 'reload_in_progress';
  constructor(readonly current: { id: number; reason: string }) {
    super(`reload ${current.id} (${current.reason}) is still in progress; try again when it has finished`);
    this.name = 'ReloadBusyError';
  }
}

/** The rollout moved since the revision the writer read (another host wrote it). */
export class RolloutConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RolloutConflictError';
  }
}

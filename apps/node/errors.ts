import type { UnavailableModel } from '../../libs/registry';

/** A version that did not load: which one, so the supervisor can mark it unavailable (a failed PREPARE's data). */
export class VersionLoadError extends Error {
  constructor(
    readonly model: string,
    readonly version: string,
    message: string,
  ) {
    super(message);
    this.name = 'VersionLoadError';
  }

  get failure(): UnavailableModel {
    return { model: this.model, version: this.version, reason: this.message };
  }
}

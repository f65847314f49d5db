/** Invalid engine options; `option` names the culprit (dotted/indexed path, e.g. `windows[1].stepMs`). */
export class EngineOptionError extends Error {
  readonly code = 'invalid_engine_option' as const;
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.name = 'EngineOptionError';
    this.option = option;
  }
}

/**
 * An event the engine cannot place (bad key, time, partition or id). The pipeline validates events before the
 * engine sees them, so this is a programming error, not a dead letter.
 */
export class EngineEventError extends Error {
  readonly code = 'invalid_engine_event' as const;
  readonly field: string;

  constructor(field: string, message: string) {
    super(message);
    this.name = 'EngineEventError';
    this.field = field;
  }
}

/** A snapshot that does not have the shape `snapshot()` writes (wrong version, missing or mistyped field). */
export class EngineSnapshotError extends Error {
  readonly code = 'invalid_engine_snapshot' as const;
  readonly path: string;

  constructor(path: string, message: string) {
    super(message);
    this.name = 'EngineSnapshotError';
    this.path = path;
  }
}

/**
 * The output shapes of the delivery pipeline's public contract: predictions
 * (`delivery.predictions.<delivery_id>`), alerts (`delivery.alerts.<delivery_id>`) and dead
 * letters (`delivery.dlq`).
 */

/** An alert is emitted when P(late) is strictly above this. */
export const ALERT_THRESHOLD = 0.8;

/** Bumped when the alert rule changes, so a new rule's decisions get new ids. */
export const ALERT_RULE_VERSION = 1;

export interface Prediction {
  event_id: string;
  delivery_id: string;
  event_time: string;
  model: string;
  version: string;
  epoch: number;
  /** P(late), in [0, 1]. */
  risk: number;
  /** 0 for the first prediction of (delivery, event); n for the n-th correction by a late event. */
  revision: number;
  decision_id: string;
  /** ISO-8601, when the pipeline published it. */
  published_at: string;
}

export interface DelayAlert extends Prediction {
  threshold: number;
}

/**
 * The sink's dedupe key (broker Msg-Id): one decision per delivery, source event, model
 * version and rule version. A revision is a new decision, so it is part of the id.
 */
export function decisionId(p: {
  delivery_id: string;
  event_id: string;
  model: string;
  version: string;
  revision: number;
  ruleVersion?: number;
}): string {
  return `${p.delivery_id}:${p.event_id}:${p.model}@${p.version}:r${p.ruleVersion ?? ALERT_RULE_VERSION}:${p.revision}`;
}

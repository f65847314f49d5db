import { PRIORITIES, type Priority } from '../protocol';

const RANK: Record<Priority, number> = { low: 0, normal: 1, high: 2 };

/**
 * A request's priority under its tenant's ceiling: asking for more than the ceiling is served at the ceiling
 * (clamped, not refused: the priority is a scheduling hint, and the tenant's operator set what it may get).
 */
export function clampPriority(asked: Priority, ceiling: Priority): Priority {
  return RANK[asked] <= RANK[ceiling] ? asked : PRIORITIES[RANK[ceiling]]!;
}

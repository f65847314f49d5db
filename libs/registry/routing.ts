/**
 * Which version serves a request (pure: the caller passes the random draw). A request names a version, an
 * alias (`stable`, `candidate`) or nothing (= stable). Unpinned requests go to the candidate with the canary
 * fraction — drawn at random, or sticky per routing key. Shadowing compares both versions on the same inputs:
 * without a canary, stable-served requests are mirrored to the candidate; with one, the canary-served requests
 * are mirrored to stable instead, so the candidate carries only its share (mirroring every stable request to it
 * as well would load it — and the workers both share — with the whole traffic, and hide a slow candidate).
 */
import { RoutingError } from './errors';
export interface ModelRoutes {
  stable: string;
  candidate?: string | undefined;
  /** 0..1 of unpinned requests sent to the candidate. */
  canaryFraction: number;
  shadow: boolean;
}

export type RouteKind = 'stable' | 'canary' | 'pinned';

export interface RouteDecision {
  version: string;
  route: RouteKind;
  /** Mirror the request to this version (its answer is compared, never returned). */
  shadowVersion: string | undefined;
}

/**
 * @param requested the request's `version` field (a version, `stable`, `candidate`, or undefined)
 * @param draw a number in [0, 1): Math.random() normally, or routingKeyDraw(key) for sticky canaries
 * @param into optional object to fill (no allocation on the hot path)
 */
export function route(
  routes: ModelRoutes,
  requested: string | undefined,
  draw: number,
  into: RouteDecision = { version: '', route: 'stable', shadowVersion: undefined },
): RouteDecision {
  into.shadowVersion = undefined;
  if (requested === 'candidate') {
    if (routes.candidate === undefined) throw new RoutingError('this model has no candidate version');
    into.version = routes.candidate;
    into.route = 'pinned';
    return into;
  }
  if (requested !== undefined && requested !== 'stable' && requested !== 'default') {
    into.version = requested;
    into.route = 'pinned';
    return into;
  }
  if (
    requested === undefined &&
    routes.candidate !== undefined &&
    routes.canaryFraction > 0 &&
    draw < routes.canaryFraction
  ) {
    into.version = routes.candidate;
    into.route = 'canary';
    if (routes.shadow && routes.candidate !== routes.stable) into.shadowVersion = routes.stable;
    return into;
  }
  into.version = routes.stable;
  into.route = 'stable';
  if (
    routes.shadow &&
    routes.canaryFraction === 0 &&
    routes.candidate !== undefined &&
    routes.candidate !== routes.stable
  )
    into.shadowVersion = routes.candidate;
  return into;
}

/** A stable draw in [0, 1) per routing key (FNV-1a), so one user keeps one side of a canary. */
export function routingKeyDraw(key: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  // Final avalanche so similar keys spread.
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  return (hash >>> 0) / 4294967296;
}

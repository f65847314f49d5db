/** The admin token: how a request presents it, and how it is compared. */
import { createHash, timingSafeEqual } from 'node:crypto';

/** The token of an `Authorization: Bearer <token>` header; '' when the header is absent or another scheme. */
export function bearerToken(authorization: string): string {
  return /^Bearer\s+(\S+)$/i.exec(authorization.trim())?.[1] ?? '';
}

/**
 * Whether `presented` is the `expected` token. Both are hashed (SHA-256) and the digests compared in constant
 * time: comparing the tokens themselves would return early on a length mismatch, and the time it takes would
 * tell a caller how long the token is.
 */
export function sameToken(expected: string, presented: string): boolean {
  const want = createHash('sha256').update(expected, 'utf8').digest();
  const got = createHash('sha256').update(presented, 'utf8').digest();
  return timingSafeEqual(want, got) && expected.length > 0;
}

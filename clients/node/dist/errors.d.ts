export declare class EoError extends Error {
    readonly sqlstate: string | null;
    readonly key: string | null;
    constructor(message: string, sqlstate?: string | null, key?: string | null, cause?: unknown);
}
/** eo is not installed, or its schema holds look-alikes: nothing was called. */
export declare class EoSetupError extends EoError {
}
/** 22004, 22023, 54000: the key is NULL, empty or over 512 bytes (or a fingerprint over 512 bytes). */
export declare class BadKeyError extends EoError {
}
/** 22000: the key was used before with a different fingerprint (HTTP 422). */
export declare class FingerprintMismatchError extends EoError {
}
/** 55006: the lease token is stale: the key was taken over. Stop; record nothing. */
export declare class StaleTokenError extends EoError {
}
/** 55000: complete/fail/extend of a key this transaction or token does not hold. */
export declare class NotHeldError extends EoError {
}
/** 42501: the key (or scope) belongs to a role the caller is not a member of. */
export declare class ForbiddenKeyError extends EoError {
}
/** 40001, 40P01, 55P03: a race or a lock wait lost; the same call again may succeed. */
export declare class RetryableError extends EoError {
}
/** 54000 on a result: over 1 MB. */
export declare class TooLargeError extends EoError {
}
/**
 * The key failed for good (eo_fail with a final SQLSTATE): eo_claim
 * replays that failure. `sqlstate` is the original error's, `message` its text.
 */
export declare class RejectedError extends EoError {
}
/** status busy, as an error (lease mode, inbox): another holder, or a retry not due. */
export declare class BusyError extends EoError {
    readonly retryAt: Date | null;
    constructor(key: string, retryAt: Date | null);
}
/** status dead, as an error: the key failed eo.max_attempts times. */
export declare class DeadError extends EoError {
    constructor(key: string);
}
/**
 * The driver's error as an EoError subclass, or the error itself if it is
 * not one of eo's refusals about the key.  `during` is the eo call
 * (a replayed rejection comes only from eo_claim).
 */
export declare function translate(err: unknown, key: string | null, during: 'claim' | 'complete' | 'other'): unknown;

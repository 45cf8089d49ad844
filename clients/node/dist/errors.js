"use strict";
/*
 * eo's refusals as classes, so that no caller matches message text.
 * Each carries the SQLSTATE, the key it was about (the caller's key, not
 * the hashed one the middleware stores) and the driver's error as cause.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.DeadError = exports.BusyError = exports.RejectedError = exports.TooLargeError = exports.RetryableError = exports.ForbiddenKeyError = exports.NotHeldError = exports.StaleTokenError = exports.FingerprintMismatchError = exports.BadKeyError = exports.EoSetupError = exports.EoError = void 0;
exports.translate = translate;
class EoError extends Error {
    sqlstate;
    key;
    constructor(message, sqlstate = null, key = null, cause) {
        super(message, cause === undefined ? undefined : { cause });
        this.name = new.target.name;
        this.sqlstate = sqlstate;
        this.key = key;
    }
}
exports.EoError = EoError;
/** eo is not installed, or its schema holds look-alikes: nothing was called. */
class EoSetupError extends EoError {
}
exports.EoSetupError = EoSetupError;
/** 22004, 22023, 54000: the key is NULL, empty or over 512 bytes (or a fingerprint over 512 bytes). */
class BadKeyError extends EoError {
}
exports.BadKeyError = BadKeyError;
/** 22000: the key was used before with a different fingerprint (HTTP 422). */
class FingerprintMismatchError extends EoError {
}
exports.FingerprintMismatchError = FingerprintMismatchError;
/** 55006: the lease token is stale: the key was taken over. Stop; record nothing. */
class StaleTokenError extends EoError {
}
exports.StaleTokenError = StaleTokenError;
/** 55000: complete/fail/extend of a key this transaction or token does not hold. */
class NotHeldError extends EoError {
}
exports.NotHeldError = NotHeldError;
/** 42501: the key (or scope) belongs to a role the caller is not a member of. */
class ForbiddenKeyError extends EoError {
}
exports.ForbiddenKeyError = ForbiddenKeyError;
/** 40001, 40P01, 55P03: a race or a lock wait lost; the same call again may succeed. */
class RetryableError extends EoError {
}
exports.RetryableError = RetryableError;
/** 54000 on a result: over 1 MB. */
class TooLargeError extends EoError {
}
exports.TooLargeError = TooLargeError;
/**
 * The key failed for good (eo_fail with a final SQLSTATE): eo_claim
 * replays that failure. `sqlstate` is the original error's, `message` its text.
 */
class RejectedError extends EoError {
}
exports.RejectedError = RejectedError;
/** status busy, as an error (lease mode, inbox): another holder, or a retry not due. */
class BusyError extends EoError {
    retryAt;
    constructor(key, retryAt) {
        super(`idempotency key "${key}" is busy` + (retryAt ? ` until ${retryAt.toISOString()}` : ''), null, key);
        this.retryAt = retryAt;
    }
}
exports.BusyError = BusyError;
/** status dead, as an error: the key failed eo.max_attempts times. */
class DeadError extends EoError {
    constructor(key) {
        super(`idempotency key "${key}" is dead: it failed eo.max_attempts times`, null, key);
    }
}
exports.DeadError = DeadError;
/** eo's C function that replays a rejected key's error (its SQLSTATE is the original's). */
const REPLAY_ROUTINE = 'eo_replay_rejection';
/**
 * The driver's error as an EoError subclass, or the error itself if it is
 * not one of eo's refusals about the key.  `during` is the eo call
 * (a replayed rejection comes only from eo_claim).
 */
function translate(err, key, during) {
    const e = err;
    if (e === null || typeof e !== 'object' || typeof e.code !== 'string')
        return err;
    const msg = typeof e.message === 'string' ? e.message : String(err);
    const code = e.code;
    if (during === 'claim' && e.routine === REPLAY_ROUTINE)
        return new RejectedError(msg, code, key, err);
    switch (code) {
        case '22000':
            return new FingerprintMismatchError(msg, code, key, err);
        case '22004':
        case '22023':
            return new BadKeyError(msg, code, key, err);
        case '54000':
            return during === 'complete' ? new TooLargeError(msg, code, key, err) : new BadKeyError(msg, code, key, err);
        case '55006':
            return new StaleTokenError(msg, code, key, err);
        case '55000':
            return new NotHeldError(msg, code, key, err);
        case '42501':
            return new ForbiddenKeyError(msg, code, key, err);
        case '40001':
        case '40P01':
        case '55P03':
            return new RetryableError(msg, code, key, err);
        default:
            return err;
    }
}

import type { Queryable } from './types';
/**
 * eo's schema as an identifier, for this connection (cached per pg Client:
 * a PoolClient is the same object each time the pool hands it out).
 * Refuses when eo is not installed, or when eo's schema holds a function
 * under the name of one this client calls that is not eo's own (a
 * look-alike someone put beside eo's, which a call could resolve to).
 */
export declare function eoSchema(db: Queryable): Promise<string>;
/** The claim's columns, every one as text. */
export declare function claimSql(s: string): string;
/** claimSql waiting at most $1 for a key in flight: key, fingerprint, lease, scope are $2..$5. */
export declare function claimWaitSql(s: string): string;
export declare function completeSql(s: string): string;
export declare function failSql(s: string): string;
export declare function extendSql(s: string): string;
export declare function recoveryPointSql(s: string): string;
export declare function statusSql(s: string): string;
/** statusSql waiting at most $1 for a claim in flight (eo_status waits for it): key and scope are $2, $3. */
export declare function statusWaitSql(s: string): string;
export declare function toDate(epoch: string | null): Date | null;
export declare function toInt(s: string | null): number | null;
export declare function toJson(s: string | null): unknown;
/** A JS value as jsonb text; undefined is SQL NULL. */
export declare function jsonParam(v: unknown): string | null;
/** A lease or delay in milliseconds, as the seconds make_interval takes. */
export declare function secondsParam(ms: number | undefined | null): number | null;

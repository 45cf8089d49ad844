/** What the client needs of a pg Client, PoolClient or Pool. */
export interface Queryable {
    query(text: string, values?: unknown[]): Promise<{
        rows: any[];
        rowCount: number | null;
    }>;
}
/** A pg.Pool, or anything that hands out clients the same way. */
export interface PoolLike extends Queryable {
    connect(): Promise<ClientLike>;
}
/** A pg PoolClient. */
export interface ClientLike extends Queryable {
    release(err?: Error | boolean): void;
}
